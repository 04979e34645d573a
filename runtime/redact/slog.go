package redact

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/probed/probed/runtime/bound"
)

// NewHandler returns a slog.Handler that applies the rule to every record
// before next sees it: the message and every string, error and Stringer
// attribute go through Text (groups included), and an attribute whose key
// IsSecretKey is replaced by Mask whatever its value. Each of those strings
// is then cut to bound.LogValueBytes (runtime/bound), since a log line may
// quote what a pod or a target sent. The agent wraps its log handler with
// it, so no log line carries what the API hides, nor grows with a pod.
func NewHandler(next slog.Handler) slog.Handler { return &handler{next: next} }

type handler struct{ next slog.Handler }

func (h *handler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h *handler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, logText(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(Attr(a))
		return true
	})
	return h.next.Handle(ctx, out)
}

func (h *handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	red := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		red[i] = Attr(a)
	}
	return &handler{next: h.next.WithAttrs(red)}
}

func (h *handler) WithGroup(name string) slog.Handler {
	return &handler{next: h.next.WithGroup(name)}
}

// Attr redacts one log attribute (see NewHandler).
func Attr(a slog.Attr) slog.Attr {
	if IsSecretKey(a.Key) {
		return slog.String(a.Key, Mask)
	}
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		if s, red := v.String(), logText(v.String()); red != s {
			return slog.String(a.Key, red)
		}
	case slog.KindGroup:
		group := v.Group()
		red := make([]any, len(group))
		for i, g := range group {
			red[i] = Attr(g)
		}
		return slog.Group(a.Key, red...)
	case slog.KindAny:
		switch x := v.Any().(type) {
		case error:
			return slog.String(a.Key, logText(x.Error()))
		case fmt.Stringer:
			return slog.String(a.Key, logText(x.String()))
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}

// logText is a log string as NewHandler writes it: redacted, then cut.
func logText(s string) string { return bound.Cut(Text(s), bound.LogValueBytes) }
