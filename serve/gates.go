package serve

import (
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/serve/client"
)

// gateRoutes adds the approve and reject endpoints. Who decided is the
// API token's name on the TCP listener; on the Unix socket (mode 0600, so
// only serve's own user reaches it) it is the local user the client
// names.
func (s *Server) gateRoutes(mux *http.ServeMux, viaToken bool) {
	mux.HandleFunc("POST /v1/runs/{id}/approve", names(s.apiGate(true, viaToken)))
	mux.HandleFunc("POST /v1/runs/{id}/reject", names(s.apiGate(false, viaToken)))
}

func (s *Server) apiGate(approve, viaToken bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req client.GateRequest
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			apiError(w, http.StatusBadRequest, "bad_request", "the body is not a gate decision: "+err.Error(), `send {"step": "STEP", "reason": "TEXT"}`)
			return
		}
		if req.Step != "" && !record.ValidName(req.Step) {
			apiError(w, http.StatusBadRequest, "bad_name", "step "+req.Step+" is not a valid name", "give the gated step's id, or none for the gate the run waits at")
			return
		}
		by := req.By
		if viaToken {
			by = "token:" + TokenSecretKey
		} else if by == "" {
			by = "local"
		}
		d := record.GateDecision{Step: req.Step, Approve: approve, By: by, Reason: req.Reason, At: time.Now().UTC()}
		rec, err := s.E.State.DecideGate(r.PathValue("id"), d)
		switch {
		case errors.Is(err, record.ErrNotApprover):
			writeJSONResponse(w, http.StatusForbidden, map[string]any{"error": client.APIErrorBody{Code: "not_approver", Message: err.Error(), Fix: "ask one of the gate's approvers"}, "run": rec})
		case errors.Is(err, record.ErrNotWaiting), errors.Is(err, record.ErrDecided):
			writeJSONResponse(w, http.StatusConflict, map[string]any{"error": client.APIErrorBody{Code: "not_waiting", Message: err.Error(), Fix: "see the run's state with kusaw show RUN"}, "run": rec})
		case err != nil:
			runError(w, err)
		default:
			s.log.Info().Str("run", rec.ID).Str("step", d.Step).Bool("approve", approve).Str("by", by).Msg("gate decided")
			writeJSONResponse(w, http.StatusOK, map[string]any{"run": rec})
		}
	}
}
