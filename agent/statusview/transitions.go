package statusview

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/probed/probed/agent/events"
)

// WatchOptions configure Transitions.
type WatchOptions struct {
	// Server is the agent's API base URL (ParseServer).
	Server string
	// Watch keeps polling for new entries until ctx ends; else Transitions
	// prints what the agent keeps and returns.
	Watch bool
	// Interval between polls while watching; default 1 s.
	Interval time.Duration
	// Client; nil: a client with a 10 s timeout.
	Client *http.Client
}

// Transitions is `probed events`: it prints the agent's health-event log
// (GET /events?type=transition) to out, one JSON object per
// line (events.Transition), oldest first. Watching, it asks every
// Interval for the entries after the last one printed (?since=) and
// prints them as they come; an agent that started again (its newest Seq
// went back) is read from its first entry. It returns ctx's end as nil,
// and the first error reaching the agent.
func Transitions(ctx context.Context, opts WatchOptions, out io.Writer) error {
	if opts.Client == nil {
		opts.Client = &http.Client{Timeout: 10 * time.Second}
	}
	if opts.Interval <= 0 {
		opts.Interval = time.Second
	}
	base := strings.TrimRight(opts.Server, "/")
	var since uint64
	for {
		var list events.TransitionList
		if err := getJSON(ctx, opts.Client, fmt.Sprintf("%s/events?type=transition&since=%d", base, since), &list); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if list.Last < since { // the agent started again
			since = 0
			continue
		}
		for _, t := range list.Transitions {
			line, err := json.Marshal(t)
			if err != nil {
				return err
			}
			if _, err := fmt.Fprintf(out, "%s\n", line); err != nil {
				return err
			}
			since = t.Seq
		}
		if !opts.Watch {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(opts.Interval):
		}
	}
}
