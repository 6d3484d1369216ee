package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/snapfence/snapfence/engine"
	"github.com/snapfence/snapfence/engine/prom"
)

// ElsewhereError is a query of a key this instance does not serve, that
// the group has assigned to another member: Location says which
// partition, and the endpoint its member advertises ("" if none).
// errors.Is(err, engine.ErrNotOwned) holds.
type ElsewhereError struct {
	Key      []byte
	Location engine.Location
}

func (e *ElsewhereError) Error() string {
	where := "another instance, which advertises no endpoint"
	if e.Location.Endpoint != "" {
		where = e.Location.Endpoint
	} else if !e.Location.Assigned {
		where = "no instance now (unassigned)"
	}
	return fmt.Sprintf("service: key %q is in %s, served by %s", e.Key, e.Location.Input, where)
}

func (e *ElsewhereError) Unwrap() error { return engine.ErrNotOwned }

// Get reads key's committed state (that of its last durable snapshot) on
// this instance, from any goroutine while Run runs, without waiting for
// the fold. A key of a partition another instance serves is an
// *ElsewhereError saying which; before the first group report (right
// after the start) engine.ErrNoGroupReport; a partition assigned here but
// still recovering an *engine.NotOwnedError. Each matches
// engine.ErrNotOwned but the second: ask again shortly.
func (s *Service[S]) Get(ctx context.Context, key []byte) (engine.Entry[S], bool, error) {
	loc, err := s.Locate(key)
	if err != nil {
		return engine.Entry[S]{Key: key, Offset: -1}, false, err
	}
	entry, ok, err := s.engine.Get(ctx, loc.Input, key, engine.ReadCommitted)
	var notOwned *engine.NotOwnedError
	if errors.As(err, &notOwned) && notOwned.State == "" {
		// Not assigned here: the group's assignment says where.
		return entry, false, &ElsewhereError{Key: key, Location: loc}
	}
	return entry, ok, err
}

// Locate says which input partition holds key and which instance serves
// it (engine.Engine.Locate on the input topic).
func (s *Service[S]) Locate(key []byte) (engine.Location, error) {
	return s.engine.Locate(s.cfg.Input, key)
}

// Handler serves, from the root:
//
//   - /livez, /readyz: the engine's health (engine.Engine.HealthHandler);
//   - GET /: the engine's status page, for people (HealthHandler);
//   - /metrics: the service's Prometheus metrics (Config.Registry);
//   - GET /keys/{key}: key's committed state as JSON,
//     {"key":"...","state":...,"offset":N}, the state as encoding/json
//     writes S; 404 for a key with no state. A key another instance
//     serves is redirected there (307, to its Endpoint + /keys/{key}),
//     once: a request already redirected, or one whose owner advertises
//     no endpoint, a partition still recovering, or a service that has
//     not read the group's assignment yet answers 503 with Retry-After
//     and the reason. Keys are the path's text, unescaped.
//
// Run serves it at Config.HTTP; mount it in a server of your own
// otherwise (at the root, or under a prefix included in Endpoint).
func (s *Service[S]) Handler() http.Handler { return s.handler }

func (s *Service[S]) newHandler() http.Handler {
	mux := http.NewServeMux()
	health := s.engine.HealthHandler(prom.Handler(s.registry))
	mux.Handle("/livez", health)
	mux.Handle("/readyz", health)
	mux.Handle("/metrics", health)
	mux.Handle("/{$}", health)
	mux.HandleFunc("GET /keys/{key}", s.serveKey)
	return mux
}

// forwardedParam marks a query redirected by another instance: it is
// not redirected again, so two instances whose reports disagree for a
// moment answer 503 rather than bounce the client between them.
const forwardedParam = "forwarded"

func (s *Service[S]) serveKey(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("key")
	entry, ok, err := s.Get(r.Context(), []byte(key))
	var elsewhere *ElsewhereError
	switch {
	case err == nil && ok:
		writeJSON(w, http.StatusOK, map[string]any{"key": key, "state": entry.State, "offset": entry.Offset})
	case err == nil:
		writeJSON(w, http.StatusNotFound, map[string]any{"key": key, "error": "no state"})
	case errors.As(err, &elsewhere) && elsewhere.Location.Endpoint != "" && elsewhere.Location.Endpoint != s.endpoint &&
		r.URL.Query().Get(forwardedParam) == "":
		http.Redirect(w, r, elsewhere.Location.Endpoint+"/keys/"+url.PathEscape(key)+"?"+forwardedParam+"=1", http.StatusTemporaryRedirect)
	case errors.Is(err, engine.ErrNotOwned) || errors.Is(err, engine.ErrNoGroupReport):
		w.Header().Set("Retry-After", strconv.Itoa(1))
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"key": key, "error": err.Error()})
	default:
		writeJSON(w, http.StatusInternalServerError, map[string]any{"key": key, "error": err.Error()})
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		code, b = http.StatusInternalServerError, []byte(fmt.Sprintf(`{"error":%q}`, "encoding the state as JSON: "+err.Error()))
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}

// server is the HTTP server Run serves Handler with.
type server struct {
	ln  net.Listener
	srv *http.Server
}

func (s *Service[S]) listen() (*server, error) {
	ln, err := net.Listen("tcp", s.cfg.HTTP)
	if err != nil {
		return nil, fmt.Errorf("service: serving HTTP on %s (service.Config.HTTP): %w", s.cfg.HTTP, err)
	}
	return &server{ln: ln, srv: &http.Server{ReadHeaderTimeout: 10 * time.Second}}, nil
}

// addr is the address the server listens on; nil for no server.
func (sv *server) addr() net.Addr {
	if sv == nil {
		return nil
	}
	return sv.ln.Addr()
}

// serve serves until ctx ends (nil) or the server fails.
func (sv *server) serve(ctx context.Context) error {
	shut := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(shut)
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = sv.srv.Shutdown(sctx)
	})
	err := sv.srv.Serve(sv.ln)
	if !stop() {
		<-shut // the shutdown began: let it end before Run returns
	}
	if !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("service: serving HTTP on %s: %w", sv.ln.Addr(), err)
	}
	return nil
}
