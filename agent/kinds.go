package agent

// knownProbeKind is the manifests' manifest.Options.KnownPluginKind: a kind
// is known when the runtime has a handler for it, in process or served by
// a plugin (pluginhost.Host.Register puts the plugins' kinds there), so a
// pod whose probed.io/probes annotation names a kind nothing serves is a
// load error naming the pod, the container and the kind. The source calls
// it only while Run scans, after New has built the runtime.
func (a *Agent) knownProbeKind(kind string) bool { return a.rt != nil && a.rt.HasKind(kind) }
