package engine

import (
	"encoding/json"
	"net/http"
)

// HealthHandler serves the engine's health for Kubernetes probes and a
// metrics scraper, at three paths (mount it at the root, or under a
// prefix with http.StripPrefix):
//
//   - /livez: 200 while the engine is live, 503 once an error has ended
//     its runner, Run has returned, or the runner was closed (see
//     Status.Live). Point a liveness probe here: a restart helps only
//     when the engine has stopped; a partition that is waiting or
//     stopped does not fail it (readiness and the metrics show those).
//   - /readyz: 200 when Status.Ready holds (the member has joined its
//     group, every partition assigned to it is recovered and running,
//     and it holds one or its last group report found no partition
//     unserved), 503 otherwise; the body is the Status as JSON either
//     way (Status.MarshalJSON), with each partition's state, recovery
//     progress, offsets, lag, last commit and error, and the unserved
//     partitions. A member assigned no partition is thus not ready while
//     the group still has a partition to hand out, nor ever without
//     group reports (a negative Config.GroupReportInterval).
//   - /metrics: served by metrics; with metrics nil there is no /metrics
//     (404), so nothing global is served by default. For Prometheus pass
//     prom.Handler(reg) (package engine/prom), reg the registry the
//     engine's metrics were registered on: the handler is taken rather
//     than a gatherer so that the engine does not depend on Prometheus.
//
// /livez also answers in JSON: {"live":true} or {"live":false,"error":"..."}.
// Both are computed per request from Status, which never waits for the
// runner, so a probe answers at once even while a recovery holds it in a
// rebalance callback. Any other path is 404.
func (e *Engine[S]) HealthHandler(metrics http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/livez", func(w http.ResponseWriter, _ *http.Request) {
		st := e.Status()
		body := struct {
			Live  bool   `json:"live"`
			Error string `json:"error,omitempty"`
		}{Live: st.Live}
		if st.Err != nil {
			body.Error = st.Err.Error()
		}
		writeJSON(w, st.Live, body)
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		st := e.Status()
		writeJSON(w, st.Ready(), st)
	})
	if metrics != nil {
		mux.Handle("/metrics", metrics)
	}
	return mux
}

// writeJSON writes v with 200 if ok, else 503.
func writeJSON(w http.ResponseWriter, ok bool, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if !ok {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_, _ = w.Write(append(b, '\n'))
}
