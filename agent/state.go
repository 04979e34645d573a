package agent

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/probed/probed/agent/state"
	"github.com/probed/probed/agent/store"
)

// stateSaver keeps the pods' last statuses in the state directory
// (manifest mode, --state-dir): it restores them into the store at start,
// writes them every interval while the store changed, and once more when
// the agent has drained (M8, M9). Without a directory it does nothing.
type stateSaver struct {
	dir      string
	interval time.Duration
	store    *store.Store
	writer   *state.Writer

	version uint64      // store version of the last write (the writer's goroutine, then the final write)
	ran     atomic.Bool // run was started: only an agent that ran writes its final state
}

// newStateSaver creates the state directory and restores its statuses
// into st; a state file that cannot be read is logged and left alone.
func newStateSaver(dir string, interval time.Duration, st *store.Store, log *slog.Logger) (*stateSaver, error) {
	s := &stateSaver{dir: dir, interval: interval, store: st}
	if dir == "" {
		return s, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("--state-dir: %w", err)
	}
	s.writer = state.NewWriter(dir, state.WriterOptions{Logger: log})
	saved, err := state.Load(dir)
	if err != nil {
		log.Error("state not restored", "err", err)
	} else if len(saved) > 0 {
		st.Restore(saved)
		log.Info("state restored", "dir", dir, "pods", len(saved))
	}
	return s, nil
}

// run writes the state file every interval while the store changed, until
// ctx is done.
func (s *stateSaver) run(ctx context.Context) error {
	s.ran.Store(true)
	if s.dir == "" {
		return nil
	}
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			s.save(false)
		}
	}
}

// close writes the final state of an agent that ran (a closer: New's undo
// list, run at the end of Run after the drain).
func (s *stateSaver) close(context.Context) error {
	if s.ran.Load() {
		s.save(true)
	}
	return nil
}

// save writes the state file when the store changed since the last write
// (or always, when final).
func (s *stateSaver) save(final bool) {
	if s.dir == "" {
		return
	}
	pods, version := s.store.Export()
	if !final && version == s.version {
		return
	}
	if !s.writer.Save(pods, final) { // logs failures, backing off
		return
	}
	s.version = version
}
