package deploy

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"

	ggcrname "github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/probed/probed/deploy/image"
)

var (
	staticOnce sync.Once
	staticPath string
	staticErr  error
)

// staticBinary builds cmd/probed once per test run with the Containerfile's
// build line (as `make image` runs it: CGO off, -trimpath), version
// 9.9.9-test, and returns its path.
func staticBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds cmd/probed")
	}
	staticOnce.Do(func() {
		data, err := os.ReadFile("../../Containerfile")
		if err != nil {
			staticErr = err
			return
		}
		build := regexp.MustCompile(`(?m)^RUN (CGO_ENABLED=0 go build .*-o /out/probed \./cmd/probed)$`).FindStringSubmatch(string(data))
		if build == nil {
			staticErr = errors.New("Containerfile has no `RUN CGO_ENABLED=0 go build ... -o /out/probed ./cmd/probed` line")
			return
		}
		dir, err := os.MkdirTemp("", "probed-static-")
		if err != nil {
			staticErr = err
			return
		}
		staticPath = filepath.Join(dir, "probed")
		cmd := exec.Command("sh", "-c", strings.Replace(build[1], "/out/probed", staticPath, 1))
		cmd.Dir = "../.."
		// As in the golang image: the build's own environment, VERSION from the ARG.
		cmd.Env = append(os.Environ(), "VERSION=9.9.9-test", "GOFLAGS=")
		if b, err := cmd.CombinedOutput(); err != nil {
			staticErr = errors.New(build[1] + ": " + err.Error() + "\n" + string(b))
		}
	})
	if staticErr != nil {
		t.Fatal(staticErr)
	}
	return staticPath
}

// containerfile is the final stage of the Containerfile: what an engine's
// build of it gives.
type containerfile struct {
	base, binary, user string
	entrypoint, cmd    []string
}

func readContainerfile(t *testing.T) containerfile {
	t.Helper()
	data, err := os.ReadFile("../../Containerfile")
	if err != nil {
		t.Fatal(err)
	}
	var cf containerfile
	for _, line := range strings.Split(string(data), "\n") {
		verb, rest, _ := strings.Cut(line, " ")
		switch verb {
		case "FROM":
			cf = containerfile{base: rest} // a new stage: only the last counts
		case "COPY":
			if f := strings.Fields(rest); len(f) == 3 && f[0] == "--from=build" && f[1] == "/out/probed" {
				cf.binary = f[2]
			}
		case "USER":
			cf.user = rest
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(rest), &cf.entrypoint); err != nil {
				t.Fatalf("Containerfile ENTRYPOINT %s: %v", rest, err)
			}
		case "CMD":
			if err := json.Unmarshal([]byte(rest), &cf.cmd); err != nil {
				t.Fatalf("Containerfile CMD %s: %v", rest, err)
			}
		}
	}
	return cf
}

// TestImageHasTheContainerfilesLayout: `make image` (deploy/image) and an
// engine's build of the Containerfile give one layout: the binary at the
// Containerfile's COPY destination, its USER, ENTRYPOINT and CMD; and what
// the distroless base gives the binary is there too: the CA bundle at the
// path Go reads first (every certificate parses), the user 65532 "nonroot"
// with its home, /tmp writable by all with the sticky bit. The binary in the
// image is the one given, byte for byte, and runs as `probed version`.
func TestImageHasTheContainerfilesLayout(t *testing.T) {
	bin := staticBinary(t)
	cf := readContainerfile(t)
	if cf.base != "gcr.io/distroless/static-debian12:nonroot" {
		t.Errorf("Containerfile's base %q: the image's layout copies distroless static's nonroot; check deploy/image against the new base", cf.base)
	}
	img, err := image.Build(image.Options{Binary: bin, Version: "9.9.9-test", OS: "linux", Architecture: runtime.GOARCH})
	if err != nil {
		t.Fatal(err)
	}
	config, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.binary != image.BinaryPath || config.Config.User != cf.user ||
		!reflect.DeepEqual(config.Config.Entrypoint, cf.entrypoint) || !reflect.DeepEqual(config.Config.Cmd, cf.cmd) {
		t.Errorf("image: binary %s, user %q, entrypoint %q, cmd %q; Containerfile: binary %s, user %q, entrypoint %q, cmd %q",
			image.BinaryPath, config.Config.User, config.Config.Entrypoint, config.Config.Cmd, cf.binary, cf.user, cf.entrypoint, cf.cmd)
	}
	if config.OS != "linux" || config.Architecture != runtime.GOARCH || config.Config.Labels["org.opencontainers.image.version"] != "9.9.9-test" {
		t.Errorf("config: %s/%s, labels %v", config.OS, config.Architecture, config.Config.Labels)
	}
	if mt, _ := img.MediaType(); mt != types.OCIManifestSchema1 {
		t.Errorf("manifest media type %s, want OCI", mt)
	}

	files := filesOf(t, img)
	want, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	got := files[strings.TrimPrefix(image.BinaryPath, "/")]
	if got == nil || !bytes.Equal(got.data, want) || got.hdr.Mode&0o111 == 0 {
		t.Fatalf("%s in the image: not the binary given, or not executable", image.BinaryPath)
	}
	roots := 0
	rest := files[strings.TrimPrefix(image.CACertificates, "/")].data
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if _, err := x509.ParseCertificate(block.Bytes); err != nil {
			t.Errorf("CA bundle: %v", err)
		}
		roots++
	}
	if roots < 100 {
		t.Errorf("CA bundle %s holds %d certificates, want the NSS roots (over 100)", image.CACertificates, roots)
	}
	if !strings.Contains(string(files["etc/passwd"].data), "nonroot:x:65532:65532:") {
		t.Errorf("/etc/passwd has no nonroot 65532:\n%s", files["etc/passwd"].data)
	}
	if h := files["home/nonroot"]; h == nil || h.hdr.Uid != 65532 || h.hdr.Typeflag != tar.TypeDir {
		t.Errorf("/home/nonroot: %+v, want a directory of 65532", h)
	}
	if h := files["tmp"]; h == nil || h.hdr.Mode&0o1777 != 0o1777 {
		t.Errorf("/tmp: %+v, want mode 1777", h)
	}

	// Built twice from the same binary: the same digest (no timestamps of the build in it).
	again, err := image.Build(image.Options{Binary: bin, Version: "9.9.9-test", OS: "linux", Architecture: runtime.GOARCH})
	if err != nil {
		t.Fatal(err)
	}
	d1, _ := img.Digest()
	d2, _ := again.Digest()
	if d1 != d2 {
		t.Errorf("two builds of one binary: digests %s and %s", d1, d2)
	}
	// The binary of the image runs (it is the static one: nothing but itself).
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "9.9.9-test") {
		t.Errorf("probed version: %v %q", err, out)
	}
}

type entry struct {
	hdr  *tar.Header
	data []byte
}

// filesOf is the image's filesystem: every layer's entries, later layers over earlier.
func filesOf(t *testing.T, img v1.Image) map[string]*entry {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	files := map[string]*entry{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[strings.TrimSuffix(strings.TrimPrefix(h.Name, "./"), "/")] = &entry{hdr: h, data: data}
	}
}

// TestImageArchiveIsAnOCILayout: the archive is an OCI image layout whose
// index names the image for containerd (io.containerd.image.name: without it
// `ctr images import` imports nothing) and whose every blob is there under
// its own digest. (The chart's end-to-end test imports it into the real
// node's containerd and runs the agent from it.)
func TestImageArchiveIsAnOCILayout(t *testing.T) {
	img, err := image.Build(image.Options{Binary: staticBinary(t), OS: "linux", Architecture: runtime.GOARCH})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := image.WriteArchive(&buf, img, "probed.test/probed:e2e"); err != nil {
		t.Fatal(err)
	}
	blobs := map[string][]byte{}
	tr := tar.NewReader(&buf)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		blobs[h.Name] = data
	}
	if string(blobs["oci-layout"]) != `{"imageLayoutVersion":"1.0.0"}` {
		t.Errorf("oci-layout %q", blobs["oci-layout"])
	}
	var index v1.IndexManifest
	if err := json.Unmarshal(blobs["index.json"], &index); err != nil {
		t.Fatal(err)
	}
	if len(index.Manifests) != 1 || index.Manifests[0].Annotations["io.containerd.image.name"] != "probed.test/probed:e2e" ||
		index.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != "e2e" {
		t.Fatalf("index.json %s", blobs["index.json"])
	}
	check := func(d v1.Hash) []byte {
		data, ok := blobs["blobs/sha256/"+d.Hex]
		sum := sha256.Sum256(data)
		if !ok || hex.EncodeToString(sum[:]) != d.Hex {
			t.Errorf("blob %s missing or with another content", d)
		}
		return data
	}
	var manifest v1.Manifest
	if err := json.Unmarshal(check(index.Manifests[0].Digest), &manifest); err != nil {
		t.Fatal(err)
	}
	check(manifest.Config.Digest)
	if len(manifest.Layers) != 2 {
		t.Errorf("%d layers, want 2 (base, binary)", len(manifest.Layers))
	}
	for _, l := range manifest.Layers {
		if l.MediaType != types.OCILayer {
			t.Errorf("layer media type %s", l.MediaType)
		}
		check(l.Digest)
	}
}

// TestImagePushesToARegistry: how a release publishes it. Push speaks the
// registry protocol to a real (in-process) registry, go-containerregistry's,
// and what is pulled back is the same image, digest for digest.
func TestImagePushesToARegistry(t *testing.T) {
	img, err := image.Build(image.Options{Binary: staticBinary(t), OS: "linux", Architecture: runtime.GOARCH})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	ref := strings.TrimPrefix(srv.URL, "http://") + "/probed/probed:v9.9.9"
	digest, err := image.Push(t.Context(), img, ref)
	if err != nil {
		t.Fatal(err)
	}
	r, err := ggcrname.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	pulled, err := remote.Image(r, remote.WithContext(t.Context()))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := pulled.Digest()
	if got != digest {
		t.Errorf("pulled %s, pushed %s", got, digest)
	}
}
