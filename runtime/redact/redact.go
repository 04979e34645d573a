// Package redact is probed's one rule for hiding secrets in what it shows:
// the /pods, /events and probe-history API, events, logs, history records
// and spans all pass their text through it, so a token is hidden everywhere
// or nowhere.
//
// The rule, applied in this order (every replacement is Mask; applying the
// rule twice changes nothing):
//
//  1. Known secret values (Secrets: the values of a container's
//     environment variables, the values of a plugin's secret-named
//     parameters) are replaced wherever they appear in the text.
//  2. URLs: in an absolute URL ("scheme://…") or a path with a query
//     ("/x?…"), every query value is replaced (all of them, not only those
//     whose key looks secret: a query is configuration that often carries
//     credentials), and so is the password of the userinfo
//     ("https://user:pass@host"); key=value pairs in path segments and the
//     fragment follow rule 3.
//  3. Credential-named pairs: "key=value", "key: value", "--key value",
//     JSON "key": "value", whose key IsSecretKey, have their value
//     replaced; an auth scheme in the value is replaced with it
//     ("Authorization: Bearer x" → "Authorization: REDACTED").
//  4. Auth header values anywhere: "Bearer <token>" and "Basic <base64 of
//     user:password>" keep the scheme and lose the credential.
//
// Structured values are redacted by key: a map entry whose key IsSecretKey
// is hidden whole (Value, Command's "--password x").
package redact

import (
	"encoding/base64"
	"net/textproto"
	"regexp"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// Mask replaces every redacted value. It is URL-safe, so a redacted URL is
// still a valid URL.
const Mask = "REDACTED"

// secretWords are the fragments of a key name that mark its value as a
// credential: password, passwd, pwd, secret, token (access_token, …), key
// (apikey, api_key, private_key, …), auth (authorization, oauth, …),
// credential, session, cookie, signature. Matching is case-insensitive
// and anywhere in the name, so "X-Api-Key" and "DB_PASSWORD" match.
const secretWords = `pass|pwd|secret|token|key|auth|cred|session|cookie|signature`

// IsSecretKey reports whether a key name (a query key, header name,
// environment variable, plugin parameter, flag or log attribute) looks like
// it holds a credential.
func IsSecretKey(name string) bool { return hasSecretWord(strings.ToLower(name)) }

// hasSecretWord reports whether lower-case text holds one of secretWords.
func hasSecretWord(lower string) bool {
	for _, w := range secretWordList {
		if strings.Contains(lower, w) {
			return true
		}
	}
	return false
}

var secretWordList = strings.Split(secretWords, "|")

// bearer and basic are auth header values anywhere in text. (The rest of
// the rule is scanned by hand: Go's regular expressions cost tens of
// microseconds per message where a scan costs a few hundred nanoseconds,
// and every failed run's message is redacted.)
var (
	bearer = regexp.MustCompile(`(?i)\b(bearer\s+)([A-Za-z0-9\-._~+/]+=*)`)
	basic  = regexp.MustCompile(`(?i)\b(basic\s+)([A-Za-z0-9+/]+=*)`)
)

// proseEnd is the punctuation that ends a URL or value in prose
// ("open /x?a=b: denied", "token=abc."); it stays outside the mask.
const proseEnd = ".,:;!)]}"

// Text redacts free text (a probe's output, an error, an event message, a
// log attribute, a command line) by rules 2–4 of the package doc.
func Text(s string) string {
	if s == "" || !mayHoldSecret(s) {
		return s
	}
	// URLs get rule 2, the text between them rules 3 and 4 (a URL's own
	// pairs are URL's business: "a=b?c=d" is two values there, one here).
	if !strings.Contains(s, "://") && strings.IndexByte(s, '?') < 0 {
		return pairs(s)
	}
	var b strings.Builder
	last := 0
	for _, m := range findURLs(s) {
		u := strings.TrimRight(s[m[0]:m[1]], proseEnd)
		b.WriteString(pairs(s[last:m[0]]))
		b.WriteString(URL(u))
		last = m[0] + len(u)
	}
	if last == 0 {
		return pairs(s)
	}
	b.WriteString(pairs(s[last:]))
	return b.String()
}

// mayHoldSecret is a cheap test that lets a single word with none of the
// rule's separators (=, :, ?, a space) skip the scans.
func mayHoldSecret(s string) bool {
	return strings.ContainsAny(s, "=:?") || strings.ContainsRune(s, ' ')
}

// isURLByte reports whether c may be part of a URL in text: URLs end at
// white space (and other controls), quotes, back quotes and angle
// brackets, which is where they end in error messages (Get "http://…": …)
// and commands.
func isURLByte(c byte) bool {
	return c > ' ' && c != '"' && c != '\'' && c != '<' && c != '>' && c != '`'
}

func isSchemeByte(c byte) bool {
	return isLetter(c) || ('0' <= c && c <= '9') || c == '+' || c == '.' || c == '-'
}

func isLetter(c byte) bool { return ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') }

// findURLs returns the [start, end) of each URL in s: an absolute URL
// (a scheme of letters, digits, "+", ".", "-" starting with a letter, then
// "://") or a path with a query ("/" … "?" and at least one more byte),
// each running to the end of its run of URL bytes.
func findURLs(s string) [][2]int {
	var out [][2]int
	for i := 0; i < len(s); {
		if !isURLByte(s[i]) {
			i++
			continue
		}
		end := i
		for end < len(s) && isURLByte(s[end]) {
			end++
		}
		if start, ok := urlStart(s[i:end]); ok {
			out = append(out, [2]int{i + start, end})
		}
		i = end
	}
	return out
}

// urlStart returns where the URL in run (a run of URL bytes) starts.
func urlStart(run string) (int, bool) {
	if k := strings.Index(run, "://"); k > 0 {
		st := k
		for st > 0 && isSchemeByte(run[st-1]) {
			st--
		}
		for st < k && !isLetter(run[st]) {
			st++
		}
		if st < k {
			return st, true
		}
	}
	// A path with a query: the first "/" that a "?" follows before any
	// other "?", with at least one byte after that "?".
	from := 0
	for {
		q := strings.IndexByte(run[from:], '?')
		if q < 0 {
			return 0, false
		}
		q += from
		if slash := strings.IndexByte(run[from:q], '/'); slash >= 0 && q+1 < len(run) {
			return from + slash, true
		}
		from = q + 1
	}
}

// pairs applies rules 3 and 4: credential-named pairs and auth values.
// Each step runs only when the text holds its word, which keeps the
// common message ("connect: connection refused") cheap.
func pairs(s string) string {
	if s == "" {
		return s
	}
	lower := strings.ToLower(s)
	if hasSecretWord(lower) {
		s = maskPairs(s)
		if strings.IndexByte(s, '-') >= 0 {
			s = maskFlags(s)
		}
	}
	if strings.Contains(lower, "bearer") {
		s = bearer.ReplaceAllString(s, "${1}"+Mask)
	}
	if strings.Contains(lower, "basic") {
		s = basic.ReplaceAllStringFunc(s, func(m string) string {
			g := basic.FindStringSubmatch(m)
			if !isBasicCredential(g[2]) {
				return m
			}
			return g[1] + Mask
		})
	}
	return s
}

// isKeyByte reports whether c may be part of a key name.
func isKeyByte(c byte) bool {
	return isLetter(c) || ('0' <= c && c <= '9') || c == '_' || c == '.' || c == '-'
}

func isBlank(c byte) bool { return c == ' ' || c == '\t' }

// authSchemes may precede a credential in a value ("Authorization: Bearer
// x"); the scheme is masked with it.
var authSchemes = []string{"bearer", "basic", "digest", "token", "negotiate"}

// maskPairs masks the value of every key=value, key: value and
// "key": "value" whose key IsSecretKey (blanks around the separator
// allowed). A value is a quoted string, or a run of bytes up to white
// space, a quote, ",", ";" or "&", without trailing prose punctuation,
// optionally after an auth scheme.
func maskPairs(s string) string {
	var b strings.Builder
	copied := 0
	for i := 0; i < len(s); i++ {
		if s[i] != '=' && s[i] != ':' {
			continue
		}
		k := i
		for k > 0 && isBlank(s[k-1]) {
			k--
		}
		if k > 0 && (s[k-1] == '"' || s[k-1] == '\'') {
			k--
		}
		keyEnd := k
		for k > 0 && isKeyByte(s[k-1]) {
			k--
		}
		if k == keyEnd || !IsSecretKey(s[k:keyEnd]) {
			continue
		}
		start := i + 1
		for start < len(s) && isBlank(s[start]) {
			start++
		}
		end := valueEnd(s, skipAuthScheme(s, start))
		if end < 0 {
			continue
		}
		b.WriteString(s[copied:start])
		b.WriteString(maskLike(s[start:end]))
		copied, i = end, end-1
	}
	if copied == 0 {
		return s
	}
	b.WriteString(s[copied:])
	return b.String()
}

// skipAuthScheme returns the position after an auth scheme and its blanks
// at s[i:], or i when there is none.
func skipAuthScheme(s string, i int) int {
	for _, scheme := range authSchemes {
		j := i + len(scheme)
		if j < len(s) && isBlank(s[j]) && strings.EqualFold(s[i:j], scheme) {
			for j < len(s) && isBlank(s[j]) {
				j++
			}
			return j
		}
	}
	return i
}

// valueEnd returns the end of the value at s[i:], or -1 when there is none.
func valueEnd(s string, i int) int {
	if i >= len(s) {
		return -1
	}
	if q := s[i]; q == '"' || q == '\'' {
		if j := strings.IndexByte(s[i+1:], q); j >= 0 {
			return i + 1 + j + 1
		}
		return -1
	}
	j := i
	for j < len(s) && s[j] > ' ' && !strings.ContainsRune(`"',;&`, rune(s[j])) {
		j++
	}
	for j > i && strings.IndexByte(proseEnd, s[j-1]) >= 0 {
		j--
	}
	if j == i {
		return -1
	}
	return j
}

// maskFlags masks the value of every "--name value" and "-name value"
// (at the start or after white space) whose name IsSecretKey: the next
// blank-separated word, unless it is itself a flag.
func maskFlags(s string) string {
	var b strings.Builder
	copied := 0
	for i := 0; i < len(s); i++ {
		if s[i] != '-' || (i > 0 && s[i-1] > ' ') {
			continue
		}
		n := i + 1
		if n < len(s) && s[n] == '-' {
			n++
		}
		nameEnd := n
		for nameEnd < len(s) && isKeyByte(s[nameEnd]) {
			nameEnd++
		}
		if nameEnd == n || !IsSecretKey(s[n:nameEnd]) {
			continue
		}
		v := nameEnd
		for v < len(s) && isBlank(s[v]) {
			v++
		}
		if v == nameEnd || v >= len(s) || s[v] <= ' ' || s[v] == '-' {
			continue
		}
		end := v
		for end < len(s) && s[end] > ' ' {
			end++
		}
		b.WriteString(s[copied:v])
		b.WriteString(Mask)
		copied, i = end, end-1
	}
	if copied == 0 {
		return s
	}
	b.WriteString(s[copied:])
	return b.String()
}

// maskLike returns Mask, keeping the quotes of a quoted value.
func maskLike(v string) string {
	if n := len(v); n >= 2 && (v[0] == '"' || v[0] == '\'') && v[n-1] == v[0] {
		return v[:1] + Mask + v[:1]
	}
	return Mask
}

// isBasicCredential reports whether v is base64 of "user:password" (the
// Basic scheme, RFC 7617), so that prose like "basic checks" is left alone.
func isBasicCredential(v string) bool {
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding} {
		if b, err := enc.DecodeString(v); err == nil && strings.IndexByte(string(b), ':') > 0 {
			return true
		}
	}
	return false
}

// URL redacts one URL or path (rule 2): every query value, the userinfo
// password, and credential-named pairs in path segments and the fragment.
// The shape is kept: "https://u:p@h/x;token=t?a=1&b#f" becomes
// "https://u:REDACTED@h/x;token=REDACTED?a=REDACTED&REDACTED#f"; a query
// element without "=" is taken as a value.
func URL(raw string) string {
	rest, fragment, hasFragment := strings.Cut(raw, "#")
	rest, query, hasQuery := strings.Cut(rest, "?")
	var b strings.Builder
	b.Grow(len(raw) + 16)
	if i := strings.Index(rest, "://"); i >= 0 {
		b.WriteString(rest[:i+3])
		rest = rest[i+3:]
		authority, path := rest, ""
		if j := strings.IndexByte(rest, '/'); j >= 0 {
			authority, path = rest[:j], rest[j:]
		}
		if at := strings.LastIndexByte(authority, '@'); at >= 0 {
			user, _, hasPassword := strings.Cut(authority[:at], ":")
			b.WriteString(user)
			if hasPassword {
				b.WriteString(":" + Mask)
			}
			authority = authority[at:]
		}
		b.WriteString(authority)
		rest = path
	}
	for i, seg := range strings.Split(rest, "/") {
		if i > 0 {
			b.WriteByte('/')
		}
		b.WriteString(pairs(seg))
	}
	if hasQuery {
		b.WriteByte('?')
		for i, el := range strings.Split(query, "&") {
			if i > 0 {
				b.WriteByte('&')
			}
			if k, _, ok := strings.Cut(el, "="); ok {
				b.WriteString(k + "=" + Mask)
			} else if el != "" {
				b.WriteString(Mask)
			}
		}
	}
	if hasFragment {
		b.WriteString("#" + pairs(fragment))
	}
	return b.String()
}

// plainHeaders are the HTTP header names whose values are shown: they name
// the target and the content type, never a credential.
var plainHeaders = map[string]bool{"Host": true, "Accept": true, "User-Agent": true, "Content-Type": true}

// Header redacts the value of a probe's or lifecycle hook's HTTP header
// named name: the values of Host, Accept, User-Agent and Content-Type
// (case-insensitive) are shown, every other non-empty value (Authorization,
// a cookie, an API key, a tenant's own header) is Mask whatever it holds.
func Header(name, value string) string {
	if value == "" || plainHeaders[textproto.CanonicalMIMEHeaderKey(name)] {
		return value
	}
	return Mask
}

// HTTPGet redacts an httpGet action of a probe or lifecycle hook in place:
// its path by URL (with the known secrets), each header value by Header. g
// may be nil.
func (s Secrets) HTTPGet(g *v1.HTTPGetAction) {
	if g == nil {
		return
	}
	g.Path = s.URL(g.Path)
	for i := range g.HTTPHeaders {
		g.HTTPHeaders[i].Value = Header(g.HTTPHeaders[i].Name, g.HTTPHeaders[i].Value)
	}
}

// Secrets is a set of values known to be secret (rule 1), replaced wherever
// they appear. The zero value knows none.
type Secrets struct {
	values []string // longest first, so a value inside another goes second
}

// The shortest environment values Secrets replaces: shorter values
// ("true", "8080", "info") would turn ordinary text into masks. A
// credential-named variable's value is replaced from MinSecretNamedLen
// bytes, any other variable's from MinValueLen bytes.
const (
	MinSecretNamedLen = 3
	MinValueLen       = 8
)

// ForContainer returns the secrets of a container that the API hides: the
// literal values of its environment variables (values from secretKeyRef or
// configMapKeyRef are not known to probed), and the values of the given
// plugin parameters whose names look secret. c may be nil.
func ForContainer(c *v1.Container, pluginParams map[string]string) Secrets {
	var s Secrets
	if c != nil {
		for i := range c.Env {
			s.add(c.Env[i].Name, c.Env[i].Value)
		}
	}
	for k, v := range pluginParams {
		if IsSecretKey(k) {
			s.add(k, v)
		}
	}
	sort.Slice(s.values, func(i, j int) bool { return len(s.values[i]) > len(s.values[j]) })
	return s
}

func (s *Secrets) add(name, value string) {
	min := MinValueLen
	if IsSecretKey(name) {
		min = MinSecretNamedLen
	}
	if len(value) >= min && value != Mask {
		s.values = append(s.values, value)
	}
}

// Text replaces the known secret values in t, then applies Text.
func (s Secrets) Text(t string) string {
	return Text(s.replaceKnown(t))
}

func (s Secrets) replaceKnown(t string) string {
	for _, v := range s.values {
		if strings.Contains(t, v) {
			t = strings.ReplaceAll(t, v, Mask)
		}
	}
	return t
}

// URL replaces the known secret values in a URL or path, then applies URL.
func (s Secrets) URL(raw string) string {
	return URL(s.replaceKnown(raw))
}

// Command redacts a command line, argument by argument: known secrets and
// Text in each, and the argument that follows a credential-named flag
// ("--password", "-token") hidden whole. The input is not modified.
func (s Secrets) Command(args []string) []string {
	if len(args) == 0 {
		return args
	}
	out := make([]string, len(args))
	for i, a := range args {
		if i > 0 && isSecretFlag(args[i-1]) {
			out[i] = Mask
			continue
		}
		out[i] = s.Text(a)
	}
	return out
}

// isSecretFlag reports whether arg is a flag without an inline value
// ("--password", not "--password=x") whose name looks secret.
func isSecretFlag(arg string) bool {
	name, ok := strings.CutPrefix(arg, "-")
	if !ok || strings.ContainsRune(arg, '=') {
		return false
	}
	return IsSecretKey(strings.TrimPrefix(name, "-"))
}

// Value redacts a decoded JSON value (maps, lists, strings): a map entry
// whose key IsSecretKey is replaced whole, every other string goes through
// s.Text. It returns the redacted value and modifies maps and lists in place.
func (s Secrets) Value(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if IsSecretKey(k) {
				x[k] = Mask
			} else {
				x[k] = s.Value(e)
			}
		}
	case []any:
		for i := range x {
			x[i] = s.Value(x[i])
		}
	case string:
		return s.Text(x)
	}
	return v
}

// Error returns err with its message redacted by s; errors.Is and errors.As
// still see err. A nil err stays nil, and an error whose message holds
// nothing to redact is returned as it is.
func (s Secrets) Error(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	if red := s.Text(msg); red != msg {
		return &redactedError{msg: red, err: err}
	}
	return err
}

type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }
