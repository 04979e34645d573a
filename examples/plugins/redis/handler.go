package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/probed/probed/plugins/sdk"
	"github.com/probed/probed/runtime"
	"github.com/probed/probed/runtime/egress"
)

// Kind is the probe kind this plugin serves.
const Kind = "redis"

// DefaultPort is the port probed when the probe names none.
const DefaultPort = 6379

// Params are the kind's parameters.
var Params = []sdk.Param{
	{Name: "password", Description: "password to authenticate with (AUTH); default none"},
	{Name: "username", Description: "ACL user to authenticate as (with password); default the default user"},
	{Name: "tls", Description: `"true": connect with TLS, without verifying the certificate (as the kubelet's HTTPS and gRPC-TLS probes); default "false"`},
}

// Handler prepares redis probes.
type Handler struct{}

type prober struct {
	port     string
	username string
	password string
	tls      bool
}

// Prepare reads the parameters; the port is plugin.port or DefaultPort. It
// fails — every run errored — when tls is not a boolean or username is set
// without password.
func (Handler) Prepare(spec *runtime.Spec) (runtime.Prober, error) {
	if spec == nil || spec.Plugin == nil {
		return nil, errors.New("redis: the probe has no plugin handler")
	}
	a := spec.Plugin
	port := a.Port.IntValue()
	if port == 0 {
		port = DefaultPort
	}
	if port < 0 || port > 65535 {
		return nil, fmt.Errorf("redis: invalid port %d", port)
	}
	p := &prober{port: strconv.Itoa(port), username: a.Params["username"], password: a.Params["password"]}
	if v, ok := a.Params["tls"]; ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return nil, fmt.Errorf("redis: tls %q: want true or false", v)
		}
		p.tls = b
	}
	if p.username != "" && p.password == "" {
		return nil, errors.New("redis: username needs a password")
	}
	return p, nil
}

// Probe opens a new connection to the pod IP (none is kept between
// probes), authenticates when a password is set, and sends PING. Every
// outcome is a verdict (nil error): PONG is Success; a connection, TLS,
// authentication or timeout error, or any other answer, is a Failure whose
// output is the error (never the password).
func (p *prober) Probe(ctx context.Context, t runtime.Target) (runtime.Outcome, error) {
	opts := &redis.Options{
		Addr:                     net.JoinHostPort(t.PodIP, p.port),
		Username:                 p.username,
		Password:                 p.password,
		Protocol:                 2, // plain RESP2: no HELLO negotiation
		DisableIdentity:          true,
		MaxRetries:               -1,
		DialerRetries:            1,
		PoolSize:                 1,
		ContextTimeoutEnabled:    true,
		ReadBufferSize:           4096,
		WriteBufferSize:          4096,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	}
	// Connections go through sdk.Dialer with the probe's egress policy
	// (cluster mode), whatever context go-redis dials with; a custom
	// dialer makes go-redis leave TLS to it.
	policy := egress.FromContext(ctx)
	opts.Dialer = func(dctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := sdk.Dialer(0).DialContext(egress.WithPolicy(dctx, policy), network, addr)
		if err != nil || !p.tls {
			return conn, err
		}
		tc := tls.Client(conn, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // as the kubelet's HTTPS and gRPC-TLS probes
		if err := tc.HandshakeContext(dctx); err != nil {
			_ = conn.Close()
			return nil, err
		}
		return tc, nil
	}
	c := redis.NewClient(opts)
	defer c.Close()
	got, err := c.Ping(ctx).Result()
	if err != nil {
		// A server's error reply (NOAUTH, WRONGPASS ...) is the target's
		// text: withheld under the egress policy, like the answer below.
		return runtime.Outcome{Result: runtime.Failure, Output: "redis PING: " + redact(egress.WithholdError(ctx, err).Error(), p.password), Cause: err}, nil
	}
	if got != "PONG" {
		return runtime.Outcome{Result: runtime.Failure, Output: fmt.Sprintf("redis PING answered %s, want PONG", egress.Withhold(ctx, strconv.Quote(shorten(got))))}, nil
	}
	return runtime.Outcome{Result: runtime.Success, Output: "PONG"}, nil
}

// redact removes secret from s (defensive: go-redis errors do not quote
// passwords today).
func redact(s, secret string) string {
	if secret == "" {
		return s
	}
	return strings.ReplaceAll(s, secret, "<redacted>")
}

func shorten(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
