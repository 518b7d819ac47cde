// Package testinfra holds nothing itself: its subpackages are the test
// infrastructure of idem, linked only into tests. testenv connects tests to
// the real Redis and PostgreSQL servers; pgproc starts private PostgreSQL
// servers; redistopo starts private Redis topologies (replicas, Sentinel,
// Cluster). What the breach lab ships in the binary lives outside it:
// internal/redisproc starts redis-server processes and internal/faultproxy
// is the TCP proxy that injects network faults.
package testinfra
