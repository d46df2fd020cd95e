package record

import (
	"encoding/json"
	"testing"
)

func TestUsageSums(t *testing.T) {
	c1, c2 := 0.5, 0.25
	a := &Usage{InputTokens: 100, OutputTokens: 10, CacheReadTokens: 1000, CostUSD: &c1, Turns: 3,
		Models: map[string]*ModelUsage{"m1": {InputTokens: 100, OutputTokens: 10, CostUSD: &c1}}}
	b := &Usage{InputTokens: 50, OutputTokens: 5, CacheWriteTokens: 7, CostUSD: &c2, Turns: 1,
		Models: map[string]*ModelUsage{"m1": {InputTokens: 20}, "m2": {InputTokens: 30, CostUSD: &c2}}}
	noCost := &Usage{InputTokens: 1, OutputTokens: 1}

	var sum *Usage
	if sum = Add(sum, nil); sum != nil {
		t.Fatal("an attempt that reported nothing made a sum")
	}
	sum = Add(sum, a)
	sum = Add(sum, nil)
	sum = Add(sum, b)
	sum = Add(sum, noCost)
	if sum.InputTokens != 151 || sum.OutputTokens != 16 || sum.CacheReadTokens != 1000 || sum.CacheWriteTokens != 7 || sum.Turns != 4 || sum.Attempts != 3 {
		t.Fatalf("sum %+v", sum)
	}
	if c, ok := sum.Cost(); !ok || c != 0.75 {
		t.Fatalf("cost %v %v", c, ok)
	}
	if sum.Tokens() != 151+16+1000+7 {
		t.Fatalf("tokens %d", sum.Tokens())
	}
	if m := sum.Models["m1"]; m.InputTokens != 120 || *m.CostUSD != 0.5 || sum.Models["m2"].InputTokens != 30 {
		t.Fatalf("models %+v", sum.Models)
	}
	// The inputs are not changed by summing.
	if a.InputTokens != 100 || *a.CostUSD != 0.5 || a.Models["m1"].InputTokens != 100 {
		t.Fatalf("input changed: %+v", a)
	}
	// A sum of sums counts the attempts of both.
	total := Add(Add(nil, sum), Add(nil, a))
	if total.Attempts != 4 {
		t.Fatalf("attempts of a sum of sums %d", total.Attempts)
	}
	// No cost reported anywhere: cost stays absent, not 0.
	only := Add(nil, noCost)
	if _, ok := only.Cost(); ok {
		t.Fatal("cost reported from nothing")
	}
	js, _ := json.Marshal(only)
	if string(js) != `{"input_tokens":1,"output_tokens":1,"attempts":1}` {
		t.Fatalf("json %s", js)
	}
}
