package pools

import "context"

// ExternalProvisioner leaves the worker replicas to something else (Kubernetes and KEDA,
// systemd): it starts and stops nothing, so the reconciler only counts the registered workers
// and relays drain and evict orders through their heartbeats.
type ExternalProvisioner struct{}

// Name is "external".
func (ExternalProvisioner) Name() string { return "external" }

// Managed is false.
func (ExternalProvisioner) Managed() bool { return false }

// Running returns nothing: no process is this provisioner's.
func (ExternalProvisioner) Running(string) []Process { return nil }

// Start refuses with ErrNotManaged.
func (ExternalProvisioner) Start(context.Context, WorkerSpec) (Process, error) {
	return Process{}, ErrNotManaged
}

// Stop does nothing: the worker's heartbeat carries the order.
func (ExternalProvisioner) Stop(string) error { return nil }

// Kill does nothing: the worker's heartbeat carries the order.
func (ExternalProvisioner) Kill(string) error { return nil }

// Exited returns nothing.
func (ExternalProvisioner) Exited() []Exit { return nil }
