package engine

import (
	"bytes"
	"encoding/json"
	"html/template"
	"net/http"
	"strconv"
	"time"
)

// HealthHandler serves the engine's health for Kubernetes probes, a
// metrics scraper and a person, at four paths (mount it at the root, or
// under a prefix with http.StripPrefix):
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
//   - / (exactly; GET and HEAD): the same Status as a small HTML page for
//     a person with a browser and no Prometheus at hand: live and ready,
//     then per partition its state (green running, amber starting,
//     recovering or waiting, red stopped or failing), lag, committed
//     offset and log end, recovery progress as a bar, restarts and
//     error; the standby replicas this instance keeps, and the group's
//     unserved partitions. It is always 200 (readiness is /readyz's to
//     say), reloads itself every 5 seconds, is never cached, and needs no
//     script nor anything outside the page. Every text on it is escaped:
//     errors carry keys and values from the input.
//
// /livez also answers in JSON: {"live":true} or {"live":false,"error":"..."}.
// All are computed per request from Status, which never waits for the
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
	page := statusPageTemplate()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		var b bytes.Buffer
		if err := page.Execute(&b, e.Status()); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write(b.Bytes())
	})
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

// statusPageTemplate is the page HealthHandler serves at /, rendering a
// Status. html/template escapes every value by its context.
func statusPageTemplate() *template.Template {
	return template.Must(template.New("status").Funcs(template.FuncMap{
		"tone": stateTone,
		"num": func(n int64) string { // -1 is unknown
			if n < 0 {
				return "–"
			}
			return strconv.FormatInt(n, 10)
		},
		"pct": recoveryPercent,
		"when": func(t time.Time) string {
			if t.IsZero() {
				return ""
			}
			return t.UTC().Format("2006-01-02 15:04:05 UTC")
		},
		"secs": func(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + " s" },
	}).Parse(statusPageHTML))
}

// stateTone is a partition state's colour class: ok (green), warn
// (amber: on its way, or waiting to start again) or bad (red).
func stateTone(s PartitionState) string {
	switch s {
	case StateRunning:
		return "ok"
	case StateStarting, StateRecovering, StateWaiting:
		return "warn"
	}
	return "bad"
}

// recoveryPercent is how far a recovery's read is, 0 to 100. The read
// starts at the cache's checkpoint, not at 0, so this is the position in
// the snapshot partition: a short delta starts far along.
func recoveryPercent(r RecoveryProgress) int {
	switch {
	case r.Done:
		return 100
	case r.Target <= 0 || r.Position <= 0:
		return 0
	}
	return int(min(100*r.Position/r.Target, 100))
}

const statusPageHTML = `<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="refresh" content="5">
<title>snapfence{{with .Identity.Group}} · {{.}}{{end}}</title>
<style>
body{font:14px/1.45 system-ui,sans-serif;margin:24px 32px;color:#222;background:#fff}
h1{font-size:20px;margin:0 0 4px}
h2{font-size:16px;margin:24px 0 6px}
.meta,.muted{color:#777}
.small{font-size:12px}
.t{white-space:nowrap}
table{border-collapse:collapse;width:100%}
th,td{padding:6px 10px;border-bottom:1px solid #e5e5e5;text-align:left;vertical-align:top}
th{background:#eee;color:#555;font-weight:600;white-space:nowrap}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
.pill{display:inline-block;padding:1px 10px;border-radius:10px;color:#fff;font-weight:600}
.ok{background:#2e9e44}.warn{background:#e69500}.bad{background:#d62728}
.bar{display:inline-block;width:120px;height:10px;background:#e5e5e5;border-radius:5px;overflow:hidden;vertical-align:middle}
.bar span{display:block;height:100%}
.err{color:#b3261e;font-family:ui-monospace,monospace;font-size:12px;white-space:pre-wrap;word-break:break-word}
</style></head><body>
<h1>snapfence</h1>
<div class="meta">{{with .Identity.Group}}group <b>{{.}}</b> · {{end}}{{with .Identity.MemberID}}member {{.}} · {{end}}{{with .Identity.InstanceID}}instance {{.}} · {{end}}generation {{.Identity.Generation}}</div>
<p><span class="pill {{if .Live}}ok{{else}}bad{{end}}">{{if .Live}}live{{else}}not live{{end}}</span>
<span class="pill {{if .Ready}}ok{{else}}warn{{end}}">{{if .Ready}}ready{{else}}not ready{{end}}</span>
{{if not .Joined}}<span class="muted">not joined</span>{{end}}</p>
{{with .Err}}<p class="err">{{.Error}}</p>{{end}}
<h2>Partitions</h2>
{{if .Partitions}}<table>
<tr><th>Partition</th><th>State</th><th class="n">Lag</th><th class="n">Committed</th><th class="n">Log end</th><th>Recovery</th><th class="n">Restarts</th><th>Error</th></tr>
{{range .Partitions}}<tr>
<td>{{.Input.Topic}}/{{.Input.Partition}}</td>
<td><span class="pill state {{tone .State}}">{{.State}}</span>{{if .Failing}} <span class="pill bad">failing</span>{{end}}{{if .Held}} <span class="muted">held</span>{{end}}{{with when .Since}}<div class="muted small t">since {{.}}</div>{{end}}</td>
<td class="n lag">{{num .Lag}}</td>
<td class="n">{{num .CommittedOffset}}{{with when .LastCommit}}<div class="muted small t">at {{.}}</div>{{end}}</td>
<td class="n">{{num .LogEndOffset}}</td>
<td>{{with .Recovery}}{{if lt .Target 0}}<span class="muted">not started</span>{{else}}<span class="t"><span class="bar"><span class="{{if .Done}}ok{{else}}warn{{end}}" style="width:{{pct .}}%"></span></span> {{pct .}}%</span>
<div class="muted small">offset {{.Position}} of {{.Target}}, {{.Snapshots}} snapshots{{if .Done}} in {{secs .Duration}}{{end}}</div>{{end}}{{end}}</td>
<td class="n">{{.Restarts}}</td>
<td>{{with .Err}}<div class="err">{{.Error}}</div>{{else}}{{with .LastFailure}}<div class="muted small">last restart: {{.Error}}</div>{{end}}{{end}}</td>
</tr>
{{end}}</table>{{else}}<p class="muted">No partition assigned.</p>{{end}}
<h2>Standby replicas</h2>
{{if .Standbys}}<table>
<tr><th>Partition</th><th class="n">Lag</th><th class="n">Position</th><th class="n">Log end</th><th>Checkpoint</th><th>Error</th></tr>
{{range .Standbys}}<tr>
<td>{{.Input.Topic}}/{{.Input.Partition}}{{if .WarmUp}} <span class="muted">warm-up</span>{{end}}</td>
<td class="n lag">{{num .Lag}}</td>
<td class="n">{{.Position}}</td>
<td class="n">{{num .LogEnd}}</td>
<td>{{if .Vouched}}vouched{{else}}<span class="muted">not yet</span>{{end}}</td>
<td>{{with .Err}}<div class="err">{{.Error}}</div>{{end}}</td>
</tr>
{{end}}</table>{{else}}<p class="muted">None.</p>{{end}}
<h2>Unserved partitions</h2>
{{if .Unserved}}<table>
<tr><th>Partition</th><th class="n">Lag</th><th class="n">Committed</th><th class="n">Log end</th><th>Why</th></tr>
{{range .Unserved}}<tr>
<td>{{.Input.Topic}}/{{.Input.Partition}}</td>
<td class="n">{{.Lag}}</td>
<td class="n">{{num .CommittedOffset}}</td>
<td class="n">{{.LogEndOffset}}</td>
<td>{{if .Stalled}}stalled at {{.Owner}}{{with when .Since}} since {{.}}{{end}}{{else}}no member assigned{{end}}</td>
</tr>
{{end}}</table>{{else}}<p class="muted">None{{with when .GroupReport}}, as of the group report at {{.}}{{end}}.</p>{{end}}
{{with .GroupReportErr}}<p class="err">group report: {{.Error}}</p>{{end}}
<p class="muted small">Reloads every 5 s. As JSON: <a href="readyz">readyz</a>.</p>
</body></html>
`
