package server

import (
	"encoding/json"
	"fmt"
	"testing"
)

// top_p 0 asks for the narrowest nucleus: the most likely token, as
// temperature 0 gives it, whatever the seed (it used to mean "off" and
// sample from the whole distribution, as top_p 1 does).
func TestTopPZeroIsNarrowest(t *testing.T) {
	_, ts := newTiny(t, Config{}, 0)
	url := ts.URL + "/v1/chat/completions"
	content := func(extra string) string {
		t.Helper()
		res, data := post(t, url, `{`+hi+`,"max_tokens":8,`+extra+`}`)
		var v struct {
			Choices []struct {
				Message struct{ Content string } `json:"message"`
			} `json:"choices"`
		}
		if res.StatusCode != 200 || json.Unmarshal(data, &v) != nil || len(v.Choices) != 1 {
			t.Fatalf("%s: %d %s", extra, res.StatusCode, data)
		}
		return v.Choices[0].Message.Content
	}
	greedy := content(`"temperature":0`)
	varied := false
	for seed := 1; seed <= 4; seed++ {
		if got := content(fmt.Sprintf(`"temperature":1,"top_p":0,"seed":%d`, seed)); got != greedy {
			t.Errorf("top_p 0, seed %d: %q, want the greedy %q", seed, got, greedy)
		}
		varied = varied || content(fmt.Sprintf(`"temperature":1,"top_p":1,"seed":%d`, seed)) != greedy
	}
	if !varied {
		t.Fatal("top_p 1 gave the greedy text for every seed: the test cannot tell top_p 0 from off")
	}
}
