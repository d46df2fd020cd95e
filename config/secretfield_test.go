package config

import (
	"strings"
	"testing"
)

// TestSecretField: the schema says which keys are secret references —
// every {secret: KEY} field, not three families — and a typo or an
// unknown provider or step is named with the nearest name.
func TestSecretField(t *testing.T) {
	names := func(p string) []string {
		switch p {
		case "steps":
			return []string{"build", "implement"}
		case "pipelines":
			return []string{"default"}
		}
		return nil
	}
	for _, k := range []string{
		"steps.build.env.TOKEN",
		"providers.claude-code.api_key",
		"serve.cluster.signing_key",
		"serve.cluster.system_key",
		"serve.cluster.operator_key",
		"pipelines.default.deliver.pull_request.token",
		"forges.github.token",
		"forges.gitlab.webhook_secret",
	} {
		if ok, err := SecretField(k, names); !ok || err != nil {
			t.Errorf("%s: %v %v, want a secret reference", k, ok, err)
		}
	}
	for k, want := range map[string]string{
		"providers.claude-code.apikey":                "did you mean providers.claude-code.api_key?",
		"providers.claud-code.api_key":                "did you mean providers.claude-code?",
		"steps.biuld.env.TOKEN":                       "did you mean steps.build?",
		"serve.listen":                                "is not a secret reference",
		"pipelines.default.deliver.pull_request.tokn": "did you mean pipelines.default.deliver.pull_request.token?",
	} {
		ok, err := SecretField(k, names)
		if ok || err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v %v, want an error with %q", k, ok, err, want)
		}
	}
	if ok, err := SecretField("api.key", names); ok || err != nil {
		t.Errorf("a named secret outside the file's keys: %v %v, want stored only", ok, err)
	}
}
