package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// writeTimeout bounds each write to a client.
const writeTimeout = time.Minute

// APIError is a failure answered in OpenAI's error format.
type APIError struct {
	Status  int    // HTTP status
	Type    string // invalid_request_error, authentication_error, ...
	Message string
	Param   string // the request field at fault ("" if none)
	Code    string // a machine-readable code ("" if none)
	// RetryAfter, in seconds, is sent as a Retry-After header when > 0.
	RetryAfter int
}

func (e *APIError) Error() string {
	if e.Param != "" {
		return fmt.Sprintf("%d %s: %s (param %s)", e.Status, e.Type, e.Message, e.Param)
	}
	return fmt.Sprintf("%d %s: %s", e.Status, e.Type, e.Message)
}

// badRequest is a 400 naming the field at fault.
func badRequest(param, format string, args ...any) *APIError {
	return &APIError{Status: http.StatusBadRequest, Type: "invalid_request_error", Param: param,
		Message: fmt.Sprintf(format, args...)}
}

func unauthorized() *APIError {
	return &APIError{Status: http.StatusUnauthorized, Type: "authentication_error", Code: "invalid_api_key",
		Message: "missing or incorrect API key: send it as Authorization: Bearer KEY"}
}

func modelNotFound(asked, served string) *APIError {
	return &APIError{Status: http.StatusNotFound, Type: "not_found_error", Param: "model", Code: "model_not_found",
		Message: fmt.Sprintf("the model %q does not exist: this server serves %q", asked, served)}
}

func notFound(path string) *APIError {
	return &APIError{Status: http.StatusNotFound, Type: "not_found_error", Code: "unknown_url",
		Message: fmt.Sprintf("no such endpoint: %s", path)}
}

func methodNotAllowed(method, path string) *APIError {
	return &APIError{Status: http.StatusMethodNotAllowed, Type: "invalid_request_error", Code: "method_not_allowed",
		Message: fmt.Sprintf("%s is not allowed on %s", method, path)}
}

func tooLarge(limit int64) *APIError {
	return &APIError{Status: http.StatusRequestEntityTooLarge, Type: "invalid_request_error", Code: "request_too_large",
		Message: fmt.Sprintf("the request body is larger than %d bytes", limit)}
}

func queueFull(waiting, retry int) *APIError {
	return &APIError{Status: http.StatusTooManyRequests, Type: "rate_limit_error", Code: "queue_full", RetryAfter: retry,
		Message: fmt.Sprintf("the server is busy: %d requests are already waiting; retry later", waiting)}
}

func unavailable(code, msg string) *APIError {
	return &APIError{Status: http.StatusServiceUnavailable, Type: "server_error", Code: code, Message: msg, RetryAfter: 1}
}

func serverError(format string, args ...any) *APIError {
	return &APIError{Status: http.StatusInternalServerError, Type: "server_error", Message: fmt.Sprintf(format, args...)}
}

// errorBody is the JSON of an APIError.
func (e *APIError) body() any {
	opt := func(s string) *string {
		if s == "" {
			return nil
		}
		return &s
	}
	return map[string]any{"error": map[string]any{
		"message": e.Message, "type": e.Type, "param": opt(e.Param), "code": opt(e.Code),
	}}
}

// writeError answers e.
func writeError(w http.ResponseWriter, e *APIError) {
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	writeJSON(w, e.Status, e.body())
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		data = []byte(`{"error":{"message":"encoding the response failed","type":"server_error","param":null,"code":null}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	http.NewResponseController(w).SetWriteDeadline(time.Now().Add(writeTimeout))
	w.WriteHeader(status)
	w.Write(append(data, '\n'))
}
