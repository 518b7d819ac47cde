// Package testinfra holds nothing itself: its subpackages are the test
// infrastructure of idem and of its breach lab. testenv connects tests to
// the real Redis and PostgreSQL servers; redisproc and redistopo start
// private redis-server processes and topologies (replicas, Sentinel,
// Cluster); faultproxy is the TCP proxy that injects network faults.
package testinfra
