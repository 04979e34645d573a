// Package image builds probed's node-agent image without a container engine
// and without a registry to start from: a static probed binary (built by the
// caller, CGO off) on an empty base that holds only what the binary needs —
// CA certificates, the user 65532 ("nonroot") and its home, /tmp — the
// layout of gcr.io/distroless/static-debian12:nonroot, which the
// Containerfile uses for those who build with an engine. Its entrypoint is
// the binary (so a pod's args, such as the chart's `run --in-cluster ...`,
// are probed's arguments) and its user 65532:65532.
//
// The image is an OCI image (OCI media types, gzip layers, two layers: the
// base files, then the binary) with fixed timestamps: the same binary gives
// the same digest. WriteArchive writes it as an OCI image layout in a tar
// archive that `ctr images import` (containerd), `podman load` and
// `docker load` read, named by the io.containerd.image.name annotation;
// Push sends it to a registry.
//
// The CA certificates are the Mozilla NSS roots of
// golang.org/x/crypto/x509roots/fallback/bundle at the version go.mod pins,
// written as PEM to /etc/ssl/certs/ca-certificates.crt (the Go runtime's
// first path on Linux): the build reads nothing from the host but the
// binary.
package image

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// The image's layout: where the binary is, who runs it, how it starts. The
// Containerfile's final stage says the same (test/deploy holds them equal).
const (
	BinaryPath     = "/usr/local/bin/probed"
	User           = "65532:65532"
	Home           = "/home/nonroot"
	CACertificates = "/etc/ssl/certs/ca-certificates.crt"
)

// Entrypoint and Cmd of the image's config: `probed run --in-cluster` when a
// pod gives no args; the chart's and the plain manifests' args replace Cmd.
var (
	Entrypoint = []string{BinaryPath}
	Cmd        = []string{"run", "--in-cluster"}
	Env        = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "SSL_CERT_FILE=" + CACertificates}
)

// Options says what to build.
type Options struct {
	// Binary is the path of a static probed binary for Platform.
	Binary string
	// Version is the image's org.opencontainers.image.version label ("" for none).
	Version string
	// OS and Architecture are the platform in the config (GOOS, GOARCH: "linux", "amd64").
	OS, Architecture string
}

// epoch is every file's and the image's creation time: a build depends on
// its inputs only.
var epoch = time.Unix(0, 0).UTC()

// Build returns the image of opts.Binary. It fails when the binary cannot be
// read; it does not check that the binary is static (the Containerfile's
// test does, for the build line both share).
func Build(opts Options) (v1.Image, error) {
	bin, err := os.ReadFile(opts.Binary)
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	if opts.OS == "" || opts.Architecture == "" {
		return nil, fmt.Errorf("image: no platform (OS %q, Architecture %q)", opts.OS, opts.Architecture)
	}
	base, err := layer(baseFiles())
	if err != nil {
		return nil, err
	}
	binary, err := layer([]file{
		{path: "usr/", mode: fs.ModeDir | 0o755},
		{path: "usr/local/", mode: fs.ModeDir | 0o755},
		{path: "usr/local/bin/", mode: fs.ModeDir | 0o755},
		{path: BinaryPath[1:], mode: 0o755, data: bin},
	})
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img,
		mutate.Addendum{Layer: base, MediaType: types.OCILayer, History: v1.History{Created: v1.Time{Time: epoch}, CreatedBy: "probed image: CA certificates, user 65532 (nonroot), /tmp", Comment: "the base"}},
		mutate.Addendum{Layer: binary, MediaType: types.OCILayer, History: v1.History{Created: v1.Time{Time: epoch}, CreatedBy: "probed image: " + BinaryPath}},
	)
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = opts.OS, opts.Architecture
	cf.Created = v1.Time{Time: epoch}
	cf.Config = v1.Config{
		User:       User,
		WorkingDir: Home,
		Entrypoint: Entrypoint,
		Cmd:        Cmd,
		Env:        Env,
		Labels: map[string]string{
			"org.opencontainers.image.title":  "probed",
			"org.opencontainers.image.source": "https://github.com/probed/probed",
		},
	}
	if opts.Version != "" {
		cf.Config.Labels["org.opencontainers.image.version"] = opts.Version
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	return img, nil
}

// file is one entry of a layer: a path without the leading slash (a
// directory's ends in "/"), its mode, owner and content.
type file struct {
	path     string
	mode     fs.FileMode
	uid, gid int
	data     []byte
}

// baseFiles is distroless static's nonroot layout, reduced to what probed
// reads: the users and groups (root, nobody, nonroot 65532), the name
// service order for Go's resolver, the CA bundle, /tmp and the user's home.
func baseFiles() []file {
	return []file{
		{path: "etc/", mode: fs.ModeDir | 0o755},
		{path: "etc/passwd", mode: 0o644, data: []byte(
			"root:x:0:0:root:/root:/sbin/nologin\n" +
				"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n" +
				"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		{path: "etc/group", mode: 0o644, data: []byte("root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n")},
		{path: "etc/nsswitch.conf", mode: 0o644, data: []byte("hosts: files dns\n")},
		{path: "etc/ssl/", mode: fs.ModeDir | 0o755},
		{path: "etc/ssl/certs/", mode: fs.ModeDir | 0o755},
		{path: CACertificates[1:], mode: 0o644, data: caBundle()},
		{path: "home/", mode: fs.ModeDir | 0o755},
		{path: Home[1:] + "/", mode: fs.ModeDir | 0o700, uid: 65532, gid: 65532},
		{path: "root/", mode: fs.ModeDir | 0o700},
		{path: "tmp/", mode: fs.ModeDir | fs.ModeSticky | 0o777},
	}
}

// caBundle is every root of the NSS bundle as PEM, in the bundle's order.
// Roots with constraints beyond X.509 (a few distrusted-after dates) are
// kept, as Debian's ca-certificates keeps them: a PEM file cannot carry the
// constraint.
func caBundle() []byte {
	var b bytes.Buffer
	for r := range bundle.Roots() {
		_ = pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: r.Certificate})
	}
	return b.Bytes()
}

// layer makes a gzip-compressed OCI layer of files, in order.
func layer(files []file) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{
			Name: f.path, Mode: int64(f.mode.Perm()), Uid: f.uid, Gid: f.gid,
			ModTime: epoch, Format: tar.FormatPAX,
		}
		if f.mode&fs.ModeSticky != 0 {
			h.Mode |= 0o1000
		}
		if f.mode.IsDir() {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("image: layer: %w", err)
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, fmt.Errorf("image: layer: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("image: layer: %w", err)
	}
	data := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("image: layer: %w", err)
	}
	return l, nil
}

// WriteArchive writes img to w as a tar archive of an OCI image layout
// (oci-layout, index.json, blobs/sha256/...), its one manifest named ref
// (a full reference such as ghcr.io/probed/probed:0.1.0) by the annotation
// io.containerd.image.name, which `ctr images import` names the image by
// (it imports nothing without it), and by org.opencontainers.image.ref.name
// (the tag, as the OCI layout spec has it).
func WriteArchive(w io.Writer, img v1.Image, ref string) error {
	r, err := name.ParseReference(ref, name.WithDefaultTag("latest"))
	if err != nil {
		return fmt.Errorf("image: %w", err)
	}
	tag := r.Identifier()
	manifest, err := img.RawManifest()
	if err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	mt, err := img.MediaType()
	if err != nil {
		return err
	}
	index, err := json.Marshal(v1.IndexManifest{
		SchemaVersion: 2,
		MediaType:     types.OCIImageIndex,
		Manifests: []v1.Descriptor{{
			MediaType: mt, Digest: digest, Size: int64(len(manifest)),
			Annotations: map[string]string{"io.containerd.image.name": r.Name(), "org.opencontainers.image.ref.name": tag},
		}},
	})
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	put := func(path string, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: path, Mode: 0o644, Size: int64(len(data)), ModTime: epoch, Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	if err := put("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return err
	}
	if err := put("index.json", index); err != nil {
		return err
	}
	blob := func(h v1.Hash) string { return "blobs/" + h.Algorithm + "/" + h.Hex }
	if err := put(blob(digest), manifest); err != nil {
		return err
	}
	config, err := img.RawConfigFile()
	if err != nil {
		return err
	}
	configName, err := img.ConfigName()
	if err != nil {
		return err
	}
	if err := put(blob(configName), config); err != nil {
		return err
	}
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return err
		}
		rc, err := l.Compressed()
		if err != nil {
			return err
		}
		data, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return err
		}
		if err := put(blob(d), data); err != nil {
			return err
		}
	}
	return tw.Close()
}

// Push sends img to the registry of ref (ghcr.io/probed/probed:v0.2.0), with
// the credentials of the Docker config (~/.docker/config.json, or
// $DOCKER_CONFIG: what `docker login` or `crane auth login` writes) unless
// opts give others (remote.WithAuth). It returns the pushed manifest's
// digest.
func Push(ctx context.Context, img v1.Image, ref string, opts ...remote.Option) (v1.Hash, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("image: %w", err)
	}
	opts = append([]remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)}, opts...)
	if err := remote.Write(r, img, opts...); err != nil {
		return v1.Hash{}, fmt.Errorf("image: push %s: %w", r, err)
	}
	return img.Digest()
}
