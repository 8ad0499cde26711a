// Package corrupt is a test transport that damages exactly one HTTP
// response body: a bit flipped, two equal-length strings swapped (two
// tensor names in a safetensors header, two values in a JSON listing), or
// the body cut short. Property tests use it to check that no single
// corrupted response turns into a "verified" wrong result.
//
// Responses are named by a key, "METHOD PATH RANGE" (the URL path without
// its query, so signed CDN URLs keep their key); a Transport with no
// target records the keys of the responses with a body it sees, so that a
// test can choose one.
package corrupt
