package servingcert_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/probed/probed/agent/kube/servingcert"
	"github.com/probed/probed/internal/kubetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const dnsName = "probed-webhook.probed.svc"

// configuration creates a MutatingWebhookConfiguration named after ns
// with two webhooks whose namespaceSelector selects no namespace (the
// server is shared) and returns its name.
func configuration(t *testing.T, ns string) string {
	name := "probed-offload-" + ns
	hook := func(n string) admissionregistrationv1.MutatingWebhook {
		return admissionregistrationv1.MutatingWebhook{
			Name:                    n,
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://127.0.0.1:1/mutate-pods")},
			Rules:                   []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create}, Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}}}},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"probed.io/test-none": ns}},
			FailurePolicy:           ptr.To(admissionregistrationv1.Ignore),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
		}
	}
	kubetest.CreateMutatingWebhookConfiguration(t, &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks:   []admissionregistrationv1.MutatingWebhook{hook("a.offload.probed.io"), hook("b.offload.probed.io")},
	})
	return name
}

func bundleOf(t *testing.T, c kubernetes.Interface, name string) [][]byte {
	t.Helper()
	cfg, err := c.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(kubetest.Context(t), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, w := range cfg.Webhooks {
		out = append(out, w.ClientConfig.CABundle)
	}
	return out
}

// verify checks that the keeper's certificate verifies for dnsName against
// bundle, as the API server checks the webhook's.
func verify(t *testing.T, get func(*tls.ClientHelloInfo) (*tls.Certificate, error), bundle []byte, now time.Time) *x509.Certificate {
	t.Helper()
	cert, err := get(nil)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := certutil.NewPoolFromBytes(bundle)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: dnsName, Roots: pool, CurrentTime: now}); err != nil {
		t.Fatalf("the served certificate does not verify against the published bundle: %v", err)
	}
	return leaf
}

// Two keepers (two replicas of the webhook) against a real API server:
// one Secret is created, both serve its certificate, the configuration's
// every webhook gets its CA; the certificate verifies for the Service's
// name against what the API server was given. A caBundle someone resets
// (a Helm upgrade of the configuration) is put back by the running keeper.
func TestKeeperProvisionsAndPublishes(t *testing.T) {
	c := kubetest.Client(t)
	ns := kubetest.Namespace(t)
	name := configuration(t, ns)
	opts := servingcert.Options{Client: c, Namespace: ns, Secret: "probed-webhook-tls", DNSNames: []string{dnsName}, WebhookConfiguration: name}
	var keepers []*servingcert.Keeper
	for range 2 {
		k, err := servingcert.New(opts)
		if err != nil {
			t.Fatal(err)
		}
		keepers = append(keepers, k)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	for _, k := range keepers {
		wg.Go(func() { _ = k.Run(ctx) })
	}
	kubetest.Eventually(t, "both keepers ready", func() bool { return keepers[0].Ready() && keepers[1].Ready() })
	secret, err := c.CoreV1().Secrets(ns).Get(kubetest.Context(t), "probed-webhook-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bundleOf(t, c, name) {
		if !bytes.Equal(b, secret.Data[servingcert.KeyCA]) {
			t.Fatalf("a webhook's caBundle is not the Secret's CA")
		}
	}
	a := verify(t, keepers[0].GetCertificate, secret.Data[servingcert.KeyCA], time.Now())
	b := verify(t, keepers[1].GetCertificate, secret.Data[servingcert.KeyCA], time.Now())
	if !a.Equal(b) {
		t.Fatal("the replicas serve different certificates")
	}

	cfg, err := c.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(kubetest.Context(t), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Webhooks[1].ClientConfig.CABundle = nil
	if _, err := c.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(kubetest.Context(t), cfg, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	kubetest.Eventually(t, "the reset caBundle put back", func() bool {
		return bytes.Equal(bundleOf(t, c, name)[1], secret.Data[servingcert.KeyCA])
	})
}

// Renewal on the fake clock: in the last third of the serving
// certificate's life a new one is issued under the same CA (the bundle
// does not change); in the last third of the CA's a new CA is issued and
// published with the old one, before the certificate it signs is served;
// a Secret a replica cannot parse (or for other names) is replaced.
func TestKeeperRenews(t *testing.T) {
	c := kubetest.Client(t)
	ns := kubetest.Namespace(t)
	name := configuration(t, ns)
	clk := testingclock.NewFakeClock(time.Now())
	k, err := servingcert.New(servingcert.Options{Client: c, Namespace: ns, Secret: "tls", DNSNames: []string{dnsName},
		WebhookConfiguration: name, CALifetime: 3 * time.Hour, CertLifetime: time.Hour, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	ctx := kubetest.Context(t)
	if err := k.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	first := verify(t, k.GetCertificate, k.CABundle(), clk.Now())
	bundle := k.CABundle()

	clk.Step(30 * time.Minute)
	if err := k.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if got := verify(t, k.GetCertificate, k.CABundle(), clk.Now()); !got.Equal(first) {
		t.Fatal("renewed with two thirds of its life left")
	}
	clk.Step(15 * time.Minute) // 45 of 60 minutes: the last third
	if err := k.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	second := verify(t, k.GetCertificate, k.CABundle(), clk.Now())
	if second.Equal(first) || !bytes.Equal(k.CABundle(), bundle) {
		t.Fatal("the serving certificate was not renewed under the same CA")
	}

	clk.Step(75 * time.Minute) // 2 h of the CA's 3 h
	if err := k.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	certs, err := certutil.ParseCertsPEM(k.CABundle())
	if err != nil || len(certs) != 2 {
		t.Fatalf("after the CA's renewal the bundle holds %d CAs (%v), want the new and the old", len(certs), err)
	}
	for _, b := range bundleOf(t, c, name) {
		if !bytes.Equal(b, k.CABundle()) {
			t.Fatal("the configuration does not hold the new bundle")
		}
	}
	third := verify(t, k.GetCertificate, k.CABundle(), clk.Now())
	if third.CheckSignatureFrom(certs[0]) != nil {
		t.Fatal("the new certificate is not signed by the new CA")
	}

	secret, err := c.CoreV1().Secrets(ns).Get(ctx, "tls", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	secret.Data[servingcert.KeyCert] = []byte("garbage")
	if _, err := c.CoreV1().Secrets(ns).Update(ctx, secret, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := k.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	verify(t, k.GetCertificate, k.CABundle(), clk.Now())

	other, err := servingcert.New(servingcert.Options{Client: c, Namespace: ns, Secret: "tls", DNSNames: []string{"other.probed.svc"}, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	cert, _ := other.GetCertificate(nil)
	if leaf, _ := x509.ParseCertificate(cert.Certificate[0]); leaf.VerifyHostname("other.probed.svc") != nil {
		t.Fatal("a certificate for other names was kept")
	}
}

// Files: the pair on disk is served and read again when it changes (after
// FilesRecheck); a pair that stops loading keeps the last good one.
func TestFilesReload(t *testing.T) {
	dir := t.TempDir()
	stamp := time.Now()
	write := func(host string) []byte {
		cert, key, err := certutil.GenerateSelfSignedCertKey(host, []net.IP{net.ParseIP("127.0.0.1")}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "tls.crt"), cert, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := keyutil.WriteKey(filepath.Join(dir, "tls.key"), key); err != nil {
			t.Fatal(err)
		}
		// A later modification time each write, whatever the file
		// system's resolution.
		stamp = stamp.Add(time.Second)
		for _, f := range []string{"tls.crt", "tls.key"} {
			if err := os.Chtimes(filepath.Join(dir, f), stamp, stamp); err != nil {
				t.Fatal(err)
			}
		}
		return cert
	}
	write("first.test")
	clk := testingclock.NewFakePassiveClock(time.Now())
	f, err := servingcert.NewFiles(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), clk)
	if err != nil {
		t.Fatal(err)
	}
	name := func() string {
		c, err := f.GetCertificate(nil)
		if err != nil {
			t.Fatal(err)
		}
		leaf, _ := x509.ParseCertificate(c.Certificate[0])
		return leaf.Subject.CommonName
	}
	if got := name(); got[:10] != "first.test" {
		t.Fatalf("serving %q", got)
	}
	write("second.test")
	if got := name(); got[:10] != "first.test" {
		t.Fatalf("reread before FilesRecheck: %q", got)
	}
	clk.SetTime(clk.Now().Add(servingcert.FilesRecheck))
	if got := name(); got[:11] != "second.test" {
		t.Fatalf("not reread after FilesRecheck: %q", got)
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), []byte("broken"), 0o600); err != nil {
		t.Fatal(err)
	}
	clk.SetTime(clk.Now().Add(servingcert.FilesRecheck))
	if got := name(); got[:11] != "second.test" {
		t.Fatalf("a broken pair replaced the good one: %q", got)
	}
	if _, err := servingcert.NewFiles(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), clk); err == nil {
		t.Fatal("NewFiles accepted a broken pair")
	}
}
