package main

// Temporary: pins the modules the project is built on until the code imports them.
import (
	_ "github.com/fsnotify/fsnotify"
	_ "github.com/hashicorp/go-plugin"
	_ "github.com/panjf2000/ants/v2"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/prometheus/client_golang/prometheus/promhttp"
	_ "github.com/prometheus/client_golang/prometheus/testutil"
	_ "github.com/prometheus/common/expfmt"
	_ "github.com/spf13/cobra"
	_ "go.opentelemetry.io/otel"
	_ "go.opentelemetry.io/otel/sdk/trace"
	_ "go.uber.org/goleak"
	_ "golang.org/x/sys/unix"
	_ "google.golang.org/grpc"
	_ "google.golang.org/grpc/health"
	_ "google.golang.org/grpc/health/grpc_health_v1"
	_ "k8s.io/api/apps/v1"
	_ "k8s.io/api/batch/v1"
	_ "k8s.io/api/core/v1"
	_ "k8s.io/apimachinery/pkg/util/sets"
	_ "k8s.io/apimachinery/pkg/util/validation"
	_ "k8s.io/apimachinery/pkg/util/validation/field"
	_ "k8s.io/apimachinery/pkg/util/yaml"
	_ "k8s.io/client-go/tools/record"
	_ "k8s.io/utils/clock"
	_ "k8s.io/utils/clock/testing"
	_ "sigs.k8s.io/yaml"
)

func main() {}
