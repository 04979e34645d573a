// Command redis is an example probed plugin serving the probe kind
// "redis": it connects to the pod's Redis server, authenticates when
// asked, and sends PING, which must answer PONG. A server that is loading
// its dataset, refuses the password or does not answer in time fails.
//
//	go build -o /usr/lib/probed/plugins/redis ./examples/plugins/redis
//
//	probed.io/probes: |
//	  [{"container": "redis", "type": "liveness", "periodSeconds": 10,
//	    "plugin": {"name": "redis", "port": 6379, "params": {"tls": "false"}}}]
//
// Parameters (all optional): see Params. The annotation is readable by
// anyone who can read the pod: prefer a Redis user with only the PING
// permission (ACL) for probes over the application's password.
package main

import (
	"context"
	"fmt"

	"github.com/hashicorp/go-hclog"
	"github.com/redis/go-redis/v9"

	"github.com/probed/probed/plugins/sdk"
)

// version is set with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	log := sdk.Logger("redis")
	// go-redis logs to stderr by itself; route it through the plugin's
	// logger (the host re-logs it) at debug level.
	redis.SetLogger(redisLogger{log})
	sdk.Serve(sdk.Plugin{
		Logger:  log,
		Name:    "redis",
		Version: version,
		// Every connection goes through sdk.Dialer, and the outputs
		// withhold what the target sent under the agent's egress policy
		// (runtime/egress; cluster mode).
		EnforcesEgress: true,
		Kinds: []sdk.Kind{{
			Name:        Kind,
			Description: "Redis PING must answer PONG",
			Params:      Params,
			Handler:     Handler{},
		}},
	})
}

type redisLogger struct{ l hclog.Logger }

func (r redisLogger) Printf(_ context.Context, format string, v ...any) {
	r.l.Debug(fmt.Sprintf(format, v...))
}
