package record

import "sort"

// Usage is what an agent's provider reported it used: tokens by kind, cost,
// turns and the same per model. A nil *Usage means "not reported", never
// zero; a field left out (nil cost, zero turns) was not reported either.
type Usage struct {
	InputTokens      int64    `json:"input_tokens"`
	OutputTokens     int64    `json:"output_tokens"`
	CacheReadTokens  int64    `json:"cache_read_tokens,omitempty"`
	CacheWriteTokens int64    `json:"cache_write_tokens,omitempty"`
	CostUSD          *float64 `json:"cost_usd,omitempty"`
	Turns            int      `json:"turns,omitempty"`
	// Models is the same, per model, when the provider breaks it down
	// (Claude Code's modelUsage).
	Models map[string]*ModelUsage `json:"models,omitempty"`
	// Attempts counts the attempts summed into a step's or run's usage
	// (those that reported any); absent on one attempt's own usage.
	Attempts int `json:"attempts,omitempty"`
}

// ModelUsage is one model's share of a Usage.
type ModelUsage struct {
	InputTokens      int64    `json:"input_tokens"`
	OutputTokens     int64    `json:"output_tokens"`
	CacheReadTokens  int64    `json:"cache_read_tokens,omitempty"`
	CacheWriteTokens int64    `json:"cache_write_tokens,omitempty"`
	CostUSD          *float64 `json:"cost_usd,omitempty"`
}

// Tokens is every token the provider counted: input, output and both
// cache kinds. It is what limits.tokens is compared with.
func (u *Usage) Tokens() int64 {
	if u == nil {
		return 0
	}
	return u.InputTokens + u.OutputTokens + u.CacheReadTokens + u.CacheWriteTokens
}

// Cost is the cost in USD, and whether any was reported.
func (u *Usage) Cost() (float64, bool) {
	if u == nil || u.CostUSD == nil {
		return 0, false
	}
	return *u.CostUSD, true
}

// Add sums one attempt's usage (or another sum) into sum and returns it;
// nil stays nil until some attempt reports usage, so a sum is absent, not
// zero, when nothing was reported.
func Add(sum, o *Usage) *Usage {
	if o == nil {
		return sum
	}
	if sum == nil {
		sum = &Usage{}
	}
	sum.Merge(o)
	if o.Attempts == 0 {
		sum.Attempts++
	} else {
		sum.Attempts += o.Attempts
	}
	return sum
}

// Merge adds o's tokens, cost, turns and models into u (the processes of
// one attempt, or running totals); it does not count attempts.
func (u *Usage) Merge(o *Usage) {
	if o == nil {
		return
	}
	u.InputTokens += o.InputTokens
	u.OutputTokens += o.OutputTokens
	u.CacheReadTokens += o.CacheReadTokens
	u.CacheWriteTokens += o.CacheWriteTokens
	u.CostUSD = addCost(u.CostUSD, o.CostUSD)
	u.Turns += o.Turns
	for name, m := range o.Models {
		if u.Models == nil {
			u.Models = map[string]*ModelUsage{}
		}
		t := u.Models[name]
		if t == nil {
			t = &ModelUsage{}
			u.Models[name] = t
		}
		t.InputTokens += m.InputTokens
		t.OutputTokens += m.OutputTokens
		t.CacheReadTokens += m.CacheReadTokens
		t.CacheWriteTokens += m.CacheWriteTokens
		t.CostUSD = addCost(t.CostUSD, m.CostUSD)
	}
}

func addCost(a, b *float64) *float64 {
	switch {
	case b == nil:
		return a
	case a == nil:
		c := *b
		return &c
	}
	c := *a + *b
	return &c
}

// ModelNames lists the models of a usage, sorted.
func (u *Usage) ModelNames() []string {
	if u == nil {
		return nil
	}
	out := make([]string, 0, len(u.Models))
	for n := range u.Models {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
