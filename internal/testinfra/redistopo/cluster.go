package redistopo

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/redisproc"
	"github.com/idemkit/idem/internal/redisrecord"
	"github.com/redis/go-redis/v9"
)

// Cluster is a Redis Cluster of primaries, each with the same number of
// replicas, created with `redis-cli --cluster create`.
type Cluster struct {
	// Nodes are every node, primaries first as created; which node is a
	// primary may change later (failover), ask the cluster.
	Nodes []*Server
}

// StartCluster starts primaries cluster nodes with replicas replicas
// each, creates the cluster over them, and waits until every node reports
// cluster_state:ok and every replica is in sync. redis-cli creates
// clusters of 3 primaries or more; a cluster of one primary without
// replicas (to measure the cost of cluster mode alone) is made by giving
// the node every slot.
func StartCluster(t testing.TB, primaries, replicas int) *Cluster {
	t.Helper()
	binaries(t, "redis-server", "redis-cli")
	if (primaries < 3 && primaries != 1) || (primaries == 1 && replicas != 0) {
		t.Fatalf("redistopo: want 1 primary without replicas or at least 3 primaries, not %d with %d replicas each", primaries, replicas)
	}
	c := &Cluster{}
	total := primaries * (1 + replicas)
	for i := range total {
		c.Nodes = append(c.Nodes, start(t, "cluster-"+strconv.Itoa(i), redisproc.Config{Args: []string{
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "3000"}}))
	}
	if primaries == 1 {
		if err := Client(t, c.Nodes[0]).Do(context.Background(), "cluster", "addslotsrange", 0, 16383).Err(); err != nil {
			t.Fatalf("redistopo: cluster addslotsrange: %v", err)
		}
	} else {
		c.create(t, replicas)
	}
	c.settle(t, replicas)
	return c
}

// create runs redis-cli --cluster create over every node.
func (c *Cluster) create(t testing.TB, replicas int) {
	t.Helper()
	args := []string{"--cluster", "create"}
	args = append(args, c.Addrs()...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	out, err := exec.Command("redis-cli", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("redistopo: redis-cli %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// settle waits until every node reports cluster_state:ok and every
// primary has its replicas in sync.
func (c *Cluster) settle(t testing.TB, replicas int) {
	t.Helper()
	c.WaitOK(t)
	for _, n := range c.Nodes {
		nc := Client(t, n)
		waitFor(t, "replication in sync on "+n.Addr, func(ctx context.Context) (bool, error) {
			role, err := redisproc.InfoField(ctx, nc, "replication", "role")
			if err != nil {
				return false, err
			}
			if role == "slave" {
				link, err := redisproc.InfoField(ctx, nc, "replication", "master_link_status")
				return link == "up", err
			}
			got, err := redisproc.InfoField(ctx, nc, "replication", "connected_slaves")
			return got == strconv.Itoa(replicas), err
		})
	}
}

// WaitOK waits until every live node reports cluster_state:ok. After a
// failover each node learns the promotion in its own time, and one that
// has not yet answers CLUSTERDOWN; a node that saw itself in a minority
// waits up to the node timeout before it serves again.
func (c *Cluster) WaitOK(t testing.TB) {
	t.Helper()
	for _, n := range c.Nodes {
		if !n.Alive() {
			continue
		}
		nc := Client(t, n)
		waitFor(t, "cluster_state:ok on "+n.Addr, func(ctx context.Context) (bool, error) {
			info, err := nc.ClusterInfo(ctx).Result()
			return strings.Contains(info, "cluster_state:ok"), err
		})
	}
}

// Addrs returns the addresses of all nodes.
func (c *Cluster) Addrs() []string { return addrs(c.Nodes) }

// Client returns a cluster client of c, closed when t ends.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), PoolSize: 64, ContextTimeoutEnabled: true})
	t.Cleanup(func() { cc.Close() })
	return cc
}

// Node returns the node with address addr, or nil.
func (c *Cluster) Node(addr string) *Server {
	for _, n := range c.Nodes {
		if n.Addr == addr {
			return n
		}
	}
	return nil
}

// SlotOwner returns the address of the primary that owns slot, as the
// node at via sees it.
func SlotOwner(ctx context.Context, via *redis.Client, slot int) (string, error) {
	shards, err := via.ClusterShards(ctx).Result()
	if err != nil {
		return "", err
	}
	for _, sh := range shards {
		for _, r := range sh.Slots {
			if r.Start > int64(slot) || int64(slot) > r.End {
				continue
			}
			for _, n := range sh.Nodes {
				if n.Role == "master" {
					return n.IP + ":" + strconv.FormatInt(n.Port, 10), nil
				}
			}
		}
	}
	return "", fmt.Errorf("redistopo: slot %d has no owner", slot)
}

// ReplicasOf returns the replicas of the primary at addr.
func (c *Cluster) ReplicasOf(ctx context.Context, addr string) ([]*Server, error) {
	primary := c.Node(addr)
	if primary == nil {
		return nil, fmt.Errorf("redistopo: %s is not a node of this cluster", addr)
	}
	var out []*Server
	for _, n := range c.Nodes {
		if n == primary {
			continue
		}
		nc := redis.NewClient(&redis.Options{Addr: n.Addr, MaxRetries: -1})
		host, err1 := redisproc.InfoField(ctx, nc, "replication", "master_host")
		port, err2 := redisproc.InfoField(ctx, nc, "replication", "master_port")
		nc.Close()
		if err1 == nil && err2 == nil && host+":"+port == addr {
			out = append(out, n)
		}
	}
	return out, nil
}

// MigrateSlot moves slot from the primary that owns it to the primary at
// to while clients keep using it, as `redis-cli --cluster reshard` does:
// SETSLOT IMPORTING on the target and MIGRATING on the source, then MIGRATE
// of the slot's keys in batches of batch keys with pause between batches
// (so traffic meets the slot half moved, with ASK and TRYAGAIN replies),
// then SETSLOT NODE on every primary.
func (c *Cluster) MigrateSlot(ctx context.Context, slot int, to string, batch int, pause time.Duration) error {
	via := redis.NewClient(&redis.Options{Addr: to, MaxRetries: -1})
	defer via.Close()
	from, err := SlotOwner(ctx, via, slot)
	if err != nil {
		return err
	}
	if from == to {
		return fmt.Errorf("redistopo: slot %d is already on %s", slot, to)
	}
	src := redis.NewClient(&redis.Options{Addr: from, MaxRetries: -1})
	defer src.Close()
	srcID, err := src.ClusterMyID(ctx).Result()
	if err != nil {
		return err
	}
	dstID, err := via.ClusterMyID(ctx).Result()
	if err != nil {
		return err
	}
	if err := via.Do(ctx, "cluster", "setslot", slot, "importing", srcID).Err(); err != nil {
		return fmt.Errorf("redistopo: setslot importing: %w", err)
	}
	if err := src.Do(ctx, "cluster", "setslot", slot, "migrating", dstID).Err(); err != nil {
		return fmt.Errorf("redistopo: setslot migrating: %w", err)
	}
	host, port, _ := strings.Cut(to, ":")
	for {
		keys, err := src.ClusterGetKeysInSlot(ctx, slot, batch).Result()
		if err != nil {
			return fmt.Errorf("redistopo: getkeysinslot: %w", err)
		}
		if len(keys) == 0 {
			break
		}
		args := []any{"migrate", host, port, "", 0, 5000, "keys"}
		for _, k := range keys {
			args = append(args, k)
		}
		// NOKEY: every key expired between GETKEYSINSLOT and MIGRATE.
		if err := src.Do(ctx, args...).Err(); err != nil && !strings.Contains(err.Error(), "NOKEY") {
			return fmt.Errorf("redistopo: migrate: %w", err)
		}
		time.Sleep(pause)
	}
	// The target first, so the slot is never owned by nobody; then the
	// source, then everyone else (as redis-cli does).
	if err := via.Do(ctx, "cluster", "setslot", slot, "node", dstID).Err(); err != nil {
		return fmt.Errorf("redistopo: setslot node on target: %w", err)
	}
	if err := src.Do(ctx, "cluster", "setslot", slot, "node", dstID).Err(); err != nil {
		return fmt.Errorf("redistopo: setslot node on source: %w", err)
	}
	for _, n := range c.Nodes {
		if n.Addr == to || n.Addr == from || !n.Alive() {
			continue
		}
		nc := redis.NewClient(&redis.Options{Addr: n.Addr, MaxRetries: -1})
		role, _ := redisproc.InfoField(ctx, nc, "replication", "role")
		if role == "master" {
			err = nc.Do(ctx, "cluster", "setslot", slot, "node", dstID).Err()
		}
		nc.Close()
		if err != nil {
			return fmt.Errorf("redistopo: setslot node on %s: %w", n.Addr, err)
		}
	}
	return nil
}

// Slot returns the cluster hash slot of key, as CLUSTER KEYSLOT does
// (redisrecord.Slot).
func Slot(key string) int { return redisrecord.Slot(key) }

// SlotOwners returns, for each of the 16384 slots, the address of the
// primary that owns it as the node at via sees it ("" for a slot nobody
// owns).
func SlotOwners(ctx context.Context, via *redis.Client) ([]string, error) {
	shards, err := via.ClusterShards(ctx).Result()
	if err != nil {
		return nil, err
	}
	owners := make([]string, 16384)
	for _, sh := range shards {
		for _, n := range sh.Nodes {
			if n.Role != "master" || n.Health != "online" {
				continue
			}
			for _, r := range sh.Slots {
				for slot := r.Start; slot <= r.End; slot++ {
					owners[slot] = n.IP + ":" + strconv.FormatInt(n.Port, 10)
				}
			}
		}
	}
	return owners, nil
}

// Shard returns a live primary that owns slots and has at least one live
// replica in sync, with those replicas, for a test that kills the primary.
func (c *Cluster) Shard(ctx context.Context) (primary *Server, replicas []*Server, err error) {
	for _, n := range c.Nodes {
		if !n.Alive() {
			continue
		}
		nc := redis.NewClient(&redis.Options{Addr: n.Addr, MaxRetries: -1})
		role, err := redisproc.InfoField(ctx, nc, "replication", "role")
		nc.Close()
		if err != nil || role != "master" {
			continue
		}
		rs, err := c.ReplicasOf(ctx, n.Addr)
		if err != nil {
			return nil, nil, err
		}
		var live []*Server
		for _, r := range rs {
			rc := redis.NewClient(&redis.Options{Addr: r.Addr, MaxRetries: -1})
			link, err := redisproc.InfoField(ctx, rc, "replication", "master_link_status")
			rc.Close()
			if err == nil && link == "up" {
				live = append(live, r)
			}
		}
		if len(live) > 0 {
			return n, live, nil
		}
	}
	return nil, nil, fmt.Errorf("redistopo: no live primary with a live replica")
}

// Promoted returns the one of replicas that reports itself a primary
// (ROLE master), or nil when none does yet.
func Promoted(ctx context.Context, replicas []*Server) *Server {
	for _, r := range replicas {
		rc := redis.NewClient(&redis.Options{Addr: r.Addr, MaxRetries: -1})
		role, err := rc.Do(ctx, "role").Slice()
		rc.Close()
		if err == nil && len(role) > 0 && role[0] == "master" {
			return r
		}
	}
	return nil
}
