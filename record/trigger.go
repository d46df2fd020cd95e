package record

import "strconv"

// Trigger is what started a run other than kusaw run or POST /v1/runs: a
// forge's webhook delivery or a schedule (run.json "trigger";
// docs/intake.md). It holds no text of the event: the issue's title and
// body reach the steps only as the run's parameters.
type Trigger struct {
	Name        string `json:"name"`                   // triggers.<name>
	Forge       string `json:"forge,omitempty"`        // github, gitlab, gitea; "" for a schedule
	Delivery    string `json:"delivery,omitempty"`     // the forge's delivery id
	Event       string `json:"event,omitempty"`        // issues.labeled, ...
	Repo        string `json:"repo,omitempty"`         // OWNER/NAME on the forge
	Sender      string `json:"sender,omitempty"`       // the forge user who caused it
	Issue       int    `json:"issue,omitempty"`        // the issue's number
	PullRequest int    `json:"pull_request,omitempty"` // the pull request's number
	Command     string `json:"command,omitempty"`      // a comment command: run, retry, ...
	Schedule    string `json:"schedule,omitempty"`     // the cron schedule that fired
}

// Label is the trigger in a few words, for kusaw runs and the web page.
func (t *Trigger) Label() string {
	if t == nil {
		return ""
	}
	switch {
	case t.Schedule != "":
		return "schedule " + t.Name
	case t.Issue > 0:
		return t.Forge + " " + t.Repo + "#" + strconv.Itoa(t.Issue)
	case t.PullRequest > 0:
		return t.Forge + " " + t.Repo + "!" + strconv.Itoa(t.PullRequest)
	}
	return t.Forge + " " + t.Name
}
