// Package servingcert keeps the offload webhook's serving certificate
// without an operator's hand, as Gatekeeper's cert-controller and
// cert-manager's CA injector do: a Keeper provisions a CA and a serving
// certificate signed by it into a Secret, renews them before they expire,
// and keeps the caBundle of every webhook of a MutatingWebhookConfiguration
// equal to the Secret's CA bundle (an upgrade that resets it is undone);
// Files serves a certificate another party keeps on disk (cert-manager's
// Secret mounted as a volume), reloaded when it changes.
//
// The Secret (type kubernetes.io/tls) holds tls.crt and tls.key (the
// serving certificate and key), ca.crt (the CA bundle the API server is to
// trust: the current CA, and the previous one while certificates it signed
// may still be served) and ca.key (the current CA's key). The CA lives
// DefaultCALifetime, a serving certificate DefaultCertLifetime; each is
// renewed when less than a third of its life is left. A new serving
// certificate under the same CA changes nothing the API server checks; a
// new CA goes into the webhook configuration (with the old one) before the
// Secret that serves certificates signed by it is written, so no replica
// ever serves a certificate the API server does not trust yet.
//
// Replicas share the Secret: the first to create it wins (the others read
// it), and a renewal is an update with the Secret's resourceVersion, so two
// replicas renewing at once write once. Why not cert-controller itself:
// it runs inside controller-runtime's manager, pinned to another minor of
// the Kubernetes libraries, for a job of two client-go calls and the
// standard library's x509.
package servingcert

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
	"k8s.io/utils/clock"
)

// Lifetimes of what a Keeper issues.
const (
	DefaultCALifetime   = 10 * 365 * 24 * time.Hour
	DefaultCertLifetime = 365 * 24 * time.Hour
	// DefaultCheckInterval is how often a Keeper looks at the Secret and
	// the configuration besides their watch events.
	DefaultCheckInterval = time.Hour
)

// Keys of the Secret's data.
const (
	KeyCert   = v1.TLSCertKey       // tls.crt
	KeyKey    = v1.TLSPrivateKeyKey // tls.key
	KeyCA     = "ca.crt"
	KeyCAKey  = "ca.key"
	backdated = 5 * time.Minute // NotBefore is set back by this much: clocks of the cluster differ
)

// Options configure a Keeper.
type Options struct {
	// Client reaches the API server (required): get, create and update
	// of the Secret, get and update of the webhook configuration, and
	// list and watch of both by name.
	Client kubernetes.Interface
	// Namespace and Secret name the Secret (required).
	Namespace, Secret string
	// DNSNames and IPs are the serving certificate's names: the webhook's
	// Service (<service>.<namespace>.svc) or, for a configuration with a
	// url, its host. At least one is required.
	DNSNames []string
	IPs      []net.IP
	// WebhookConfiguration names the MutatingWebhookConfiguration whose
	// webhooks' caBundle the Keeper keeps; "": none (the bundle is
	// someone else's to publish).
	WebhookConfiguration string
	// CALifetime and CertLifetime default to DefaultCALifetime and
	// DefaultCertLifetime; CheckInterval to DefaultCheckInterval.
	CALifetime, CertLifetime, CheckInterval time.Duration
	// Clock; nil: the real clock.
	Clock clock.WithTicker
	// Logger; nil: slog.Default().
	Logger *slog.Logger
}

// Keeper keeps the Secret, the served certificate and the configuration's
// caBundle. Create it with New, then Run it.
type Keeper struct {
	opts    Options
	log     *slog.Logger
	current atomic.Pointer[tls.Certificate]
	bundle  atomic.Pointer[[]byte]
	wake    chan struct{}
	started atomic.Bool
}

// New returns a Keeper; it starts nothing.
func New(opts Options) (*Keeper, error) {
	switch {
	case opts.Client == nil:
		return nil, errors.New("servingcert: no client")
	case opts.Namespace == "" || opts.Secret == "":
		return nil, errors.New("servingcert: the Secret's namespace and name are required")
	case len(opts.DNSNames) == 0 && len(opts.IPs) == 0:
		return nil, errors.New("servingcert: the certificate needs a DNS name or an IP")
	}
	if opts.CALifetime <= 0 {
		opts.CALifetime = DefaultCALifetime
	}
	if opts.CertLifetime <= 0 {
		opts.CertLifetime = DefaultCertLifetime
	}
	if opts.CheckInterval <= 0 {
		opts.CheckInterval = DefaultCheckInterval
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Keeper{opts: opts, log: opts.Logger, wake: make(chan struct{}, 1)}, nil
}

// GetCertificate serves the current certificate (tls.Config.GetCertificate);
// an error until the first is known.
func (k *Keeper) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if c := k.current.Load(); c != nil {
		return c, nil
	}
	return nil, errors.New("servingcert: no serving certificate yet")
}

// Ready reports whether a certificate is served and, with a webhook
// configuration, its caBundle was found equal to the Secret's bundle.
func (k *Keeper) Ready() bool { return k.current.Load() != nil && k.bundle.Load() != nil }

// CABundle returns the CA bundle the Keeper publishes (nil before the
// first Sync).
func (k *Keeper) CABundle() []byte {
	if b := k.bundle.Load(); b != nil {
		return *b
	}
	return nil
}

// Run keeps everything current until ctx ends: a Sync now, then on every
// change of the Secret or the configuration and every CheckInterval; a
// failed Sync is retried after a backoff from one second up to the
// interval. It returns nil; an error only when called twice.
func (k *Keeper) Run(ctx context.Context) error {
	if !k.started.CompareAndSwap(false, true) {
		return errors.New("servingcert: Run called twice")
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	notify := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { k.poke() },
		UpdateFunc: func(any, any) { k.poke() },
		DeleteFunc: func(any) { k.poke() },
	}
	byName := func(name string) informers.SharedInformerOption {
		return informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
		})
	}
	secrets := informers.NewSharedInformerFactoryWithOptions(k.opts.Client, 0, informers.WithNamespace(k.opts.Namespace), byName(k.opts.Secret))
	if _, err := secrets.Core().V1().Secrets().Informer().AddEventHandler(notify); err != nil {
		return err
	}
	secrets.Start(ctx.Done())
	defer secrets.Shutdown()
	if name := k.opts.WebhookConfiguration; name != "" {
		configs := informers.NewSharedInformerFactoryWithOptions(k.opts.Client, 0, byName(name))
		if _, err := configs.Admissionregistration().V1().MutatingWebhookConfigurations().Informer().AddEventHandler(notify); err != nil {
			return err
		}
		configs.Start(ctx.Done())
		defer configs.Shutdown()
	}
	backoff := time.Second
	for {
		wait := k.opts.CheckInterval
		if err := k.Sync(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			k.log.Error("serving certificate", "secret", k.opts.Namespace+"/"+k.opts.Secret, "err", err)
			wait, backoff = backoff, min(2*backoff, k.opts.CheckInterval)
		} else {
			backoff = time.Second
		}
		t := k.opts.Clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-k.wake:
		case <-t.C():
		}
		t.Stop()
	}
}

func (k *Keeper) poke() {
	select {
	case k.wake <- struct{}{}:
	default:
	}
}

// Sync makes the Secret current (created, or renewed when what it holds
// is invalid, not for the names, or in the last third of its life), the
// webhook configuration's caBundle equal to its CA bundle, and serves its
// certificate.
func (k *Keeper) Sync(ctx context.Context) error {
	secrets := k.opts.Client.CoreV1().Secrets(k.opts.Namespace)
	secret, err := secrets.Get(ctx, k.opts.Secret, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		secret = nil
	case err != nil:
		return fmt.Errorf("get secret %s/%s: %w", k.opts.Namespace, k.opts.Secret, err)
	}
	now := k.opts.Clock.Now()
	state := parse(secret)
	if next, why := k.renew(state, now); next != nil {
		k.log.Info("serving certificate: issuing", "secret", k.opts.Namespace+"/"+k.opts.Secret, "why", why)
		// The API server must trust a new CA before anyone serves a
		// certificate it signed.
		if !bytes.Equal(next.bundle, state.bundle) {
			if err := k.publish(ctx, next.bundle); err != nil {
				return err
			}
		}
		if secret, err = k.write(ctx, secret, next); err != nil {
			return err
		}
		state = parse(secret)
	}
	if state.serving == nil {
		return errors.New("the secret holds no usable certificate")
	}
	k.current.Store(state.serving)
	if err := k.publish(ctx, state.bundle); err != nil {
		return err
	}
	b := state.bundle
	k.bundle.Store(&b)
	return nil
}

// state is what a Secret holds, parsed; nil fields are missing or invalid.
type state struct {
	ca      *x509.Certificate
	caKey   crypto.Signer
	cert    *x509.Certificate
	serving *tls.Certificate
	bundle  []byte
	raw     map[string][]byte
}

func parse(s *v1.Secret) *state {
	st := &state{}
	if s == nil {
		return st
	}
	st.raw = s.Data
	st.bundle = s.Data[KeyCA]
	if certs, err := certutil.ParseCertsPEM(s.Data[KeyCA]); err == nil && len(certs) > 0 {
		if key, err := keyutil.ParsePrivateKeyPEM(s.Data[KeyCAKey]); err == nil {
			if signer, ok := key.(crypto.Signer); ok && publicKeysEqual(signer.Public(), certs[0].PublicKey) {
				st.ca, st.caKey = certs[0], signer
			}
		}
	}
	if pair, err := tls.X509KeyPair(s.Data[KeyCert], s.Data[KeyKey]); err == nil {
		if leaf, err := x509.ParseCertificate(pair.Certificate[0]); err == nil {
			pair.Leaf = leaf
			st.cert, st.serving = leaf, &pair
		}
	}
	return st
}

func publicKeysEqual(a, b crypto.PublicKey) bool {
	ea, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && ea.Equal(b)
}

// issued is what a renewal writes.
type issued struct {
	ca, caKey, cert, key, bundle []byte
}

// renew returns what to write, and why, when the state needs it; nil when
// it is current.
func (k *Keeper) renew(st *state, now time.Time) (*issued, string) {
	caWhy := ""
	switch {
	case st.ca == nil:
		caWhy = "no usable CA"
	case late(st.ca, now):
		caWhy = "the CA is in the last third of its life"
	}
	certWhy := caWhy
	if certWhy == "" {
		switch {
		case st.cert == nil:
			certWhy = "no usable serving certificate"
		case late(st.cert, now):
			certWhy = "the serving certificate is in the last third of its life"
		case st.cert.CheckSignatureFrom(st.ca) != nil:
			certWhy = "the serving certificate is not signed by the CA"
		case !k.names(st.cert):
			certWhy = "the serving certificate is not for the webhook's names"
		}
	}
	if certWhy == "" {
		return nil, ""
	}
	out := &issued{}
	ca, caKey := st.ca, st.caKey
	if caWhy != "" {
		var err error
		if ca, caKey, err = newCA(now, k.opts.CALifetime); err != nil {
			return nil, ""
		}
		out.ca = encodeCert(ca)
		out.caKey, _ = keyutil.MarshalPrivateKeyToPEM(caKey)
		out.bundle = out.ca
		// The previous CA stays trusted while what it signed may be
		// served.
		if st.ca != nil && now.Before(st.ca.NotAfter) {
			out.bundle = append(slices.Clone(out.ca), encodeCert(st.ca)...)
		}
	} else {
		out.ca, out.caKey = encodeCert(ca), st.raw[KeyCAKey]
		out.bundle = st.bundle
	}
	cert, key, err := k.newServing(ca, caKey, now)
	if err != nil {
		return nil, ""
	}
	out.cert = encodeCert(cert)
	out.key, _ = keyutil.MarshalPrivateKeyToPEM(key)
	return out, certWhy
}

// late reports whether c is in the last third of its life (or past it).
func late(c *x509.Certificate, now time.Time) bool {
	life := c.NotAfter.Sub(c.NotBefore)
	return now.After(c.NotAfter.Add(-life / 3))
}

// names reports whether c is valid for every name of the options.
func (k *Keeper) names(c *x509.Certificate) bool {
	for _, n := range k.opts.DNSNames {
		if c.VerifyHostname(n) != nil {
			return false
		}
	}
	for _, ip := range k.opts.IPs {
		if c.VerifyHostname(ip.String()) != nil {
			return false
		}
	}
	return true
}

func newCA(now time.Time, life time.Duration) (*x509.Certificate, crypto.Signer, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: fmt.Sprintf("probed-webhook-ca@%d", now.Unix())},
		NotBefore:             now.Add(-backdated),
		NotAfter:              now.Add(life),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, err
	}
	ca, err := x509.ParseCertificate(der)
	return ca, key, err
}

func (k *Keeper) newServing(ca *x509.Certificate, caKey crypto.Signer, now time.Time) (*x509.Certificate, crypto.Signer, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	notAfter := now.Add(k.opts.CertLifetime)
	if notAfter.After(ca.NotAfter) {
		notAfter = ca.NotAfter
	}
	cn := ""
	if len(k.opts.DNSNames) > 0 {
		cn = k.opts.DNSNames[0]
	} else {
		cn = k.opts.IPs[0].String()
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: cn},
		DNSNames:     k.opts.DNSNames,
		IPAddresses:  k.opts.IPs,
		NotBefore:    now.Add(-backdated),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		return nil, nil, err
	}
	c, err := x509.ParseCertificate(der)
	return c, key, err
}

// encodeCert is a certificate in PEM.
func encodeCert(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: certutil.CertificateBlockType, Bytes: c.Raw})
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n.Add(n, big.NewInt(1))
}

// write creates the Secret or updates it under its resourceVersion, and
// returns it as stored: on a conflict (another replica wrote first) the
// winner's.
func (k *Keeper) write(ctx context.Context, secret *v1.Secret, next *issued) (*v1.Secret, error) {
	secrets := k.opts.Client.CoreV1().Secrets(k.opts.Namespace)
	data := map[string][]byte{KeyCert: next.cert, KeyKey: next.key, KeyCA: next.bundle, KeyCAKey: next.caKey}
	if secret == nil {
		s := &v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: k.opts.Secret, Namespace: k.opts.Namespace,
			Labels: map[string]string{"app.kubernetes.io/managed-by": "probed-webhook"}}, Type: v1.SecretTypeTLS, Data: data}
		created, err := secrets.Create(ctx, s, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return secrets.Get(ctx, k.opts.Secret, metav1.GetOptions{})
		}
		if err != nil {
			return nil, fmt.Errorf("create secret %s/%s: %w", k.opts.Namespace, k.opts.Secret, err)
		}
		return created, nil
	}
	s := secret.DeepCopy()
	s.Data = data
	updated, err := secrets.Update(ctx, s, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) {
		return secrets.Get(ctx, k.opts.Secret, metav1.GetOptions{})
	}
	if err != nil {
		return nil, fmt.Errorf("update secret %s/%s: %w", k.opts.Namespace, k.opts.Secret, err)
	}
	return updated, nil
}

// publish sets the caBundle of every webhook of the configuration to
// bundle, when one differs. A configuration not there yet is not an error:
// it is published when it appears (its watch wakes Run).
func (k *Keeper) publish(ctx context.Context, bundle []byte) error {
	name := k.opts.WebhookConfiguration
	if name == "" || len(bundle) == 0 {
		return nil
	}
	configs := k.opts.Client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	for attempt := 0; ; attempt++ {
		cfg, err := configs.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			k.log.Info("serving certificate: the webhook configuration is not there yet", "configuration", name)
			return nil
		}
		if err != nil {
			return fmt.Errorf("get mutatingwebhookconfiguration %s: %w", name, err)
		}
		changed := false
		for i := range cfg.Webhooks {
			if cc := &cfg.Webhooks[i].ClientConfig; !bytes.Equal(cc.CABundle, bundle) {
				cc.CABundle, changed = bundle, true
			}
		}
		if !changed {
			return nil
		}
		_, err = configs.Update(ctx, cfg, metav1.UpdateOptions{})
		if err == nil {
			k.log.Info("serving certificate: caBundle published", "configuration", name)
			return nil
		}
		if !apierrors.IsConflict(err) || attempt >= 3 {
			return fmt.Errorf("update the caBundle of mutatingwebhookconfiguration %s: %w", name, err)
		}
	}
}
