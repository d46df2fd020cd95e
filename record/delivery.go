package record

import "time"

// Delivery is run.json's record of where a successful run's work went
// (pipelines.<name>.deliver). Its failure never changes the run's state.
type Delivery struct {
	State      string    `json:"state"` // "delivered" or "failed"
	Repo       string    `json:"repo"`
	Merged     string    `json:"merged,omitempty"` // the commit the target branch points at
	Into       string    `json:"into,omitempty"`
	Pushed     string    `json:"pushed,omitempty"` // remote/branch
	PullURL    string    `json:"pull_request_url,omitempty"`
	PullNumber int       `json:"pull_request_number,omitempty"`
	Failed     string    `json:"failed_step,omitempty"` // merge, push or pull_request
	Message    string    `json:"message,omitempty"`
	Fix        string    `json:"fix,omitempty"`
	Time       time.Time `json:"time"`
}

// Delivery states.
const (
	DeliveryDone   = "delivered"
	DeliveryFailed = "failed"
)
