// Package e2e holds the end-to-end tests of the probed binary: TestMain
// builds cmd/probed once, and the tests run `probed run` and `probed check`
// as child processes against real local targets (HTTP, HTTPS, TCP, gRPC
// health servers and exec commands), on loopback only.
//
// The package has no code outside its tests.
package e2e
