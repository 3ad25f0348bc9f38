// describe-load-go: franz-go's kadm.DescribeTransactions in a closed loop,
// the Go peer of bench/java's describe-load: the same roles file
// ("<role> <producerId>:<epoch>" per line), concurrency and durations, and
// the same JSON line at the end, so bench/network.py reads both alike.
//
//	go run . --bootstrap 127.0.0.1:9092 --roles-file roles.txt --concurrency 64 --duration 10 --warmup 2
//
// Each of --concurrency workers asks for one role at a time, in turn; an
// answer counts as a check, a mismatch when its pair is not the file's.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

type role struct{ name, token string }

func main() {
	bootstrap := flag.String("bootstrap", "127.0.0.1:9092", "bootstrap servers, comma-separated")
	rolesFile := flag.String("roles-file", "", "roles and tokens, one '<role> <id>:<epoch>' per line")
	concurrency := flag.Int("concurrency", 64, "checks in flight")
	duration := flag.Float64("duration", 10, "measured seconds")
	warmup := flag.Float64("warmup", 2, "unmeasured seconds first")
	flag.Parse()
	roles, err := readRoles(*rolesFile)
	if err != nil || len(roles) == 0 {
		fmt.Fprintln(os.Stderr, "describe-load-go: roles:", err)
		os.Exit(2)
	}
	// The Java peer's settings where franz-go has them: 5 s per request,
	// retry backoff 100 ms doubling to 1 s.
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(strings.Split(*bootstrap, ",")...),
		kgo.RequestTimeoutOverhead(5*time.Second),
		kgo.RetryTimeout(5*time.Second),
		kgo.RetryBackoffFn(func(tries int) time.Duration {
			d := 100 * time.Millisecond << min(tries, 4)
			return min(d, time.Second)
		}),
	)
	if err != nil {
		fmt.Fprintln(os.Stderr, "describe-load-go:", err)
		os.Exit(2)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)

	var next atomic.Uint64
	var measuring atomic.Bool
	var mu sync.Mutex
	var latencies []time.Duration
	var checks, errors, mismatches atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < *concurrency; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			for {
				select {
				case <-stop:
					mu.Lock()
					latencies = append(latencies, mine...)
					mu.Unlock()
					return
				default:
				}
				r := roles[next.Add(1)%uint64(len(roles))]
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				began := time.Now()
				described, err := adm.DescribeTransactions(ctx, r.name)
				took := time.Since(began)
				cancel()
				if !measuring.Load() {
					continue
				}
				checks.Add(1)
				mine = append(mine, took)
				d, ok := described[r.name]
				switch {
				case err != nil || !ok || d.Err != nil:
					errors.Add(1)
				case fmt.Sprintf("%d:%d", d.ProducerID, d.ProducerEpoch) != r.token:
					mismatches.Add(1)
				}
			}
		}()
	}
	time.Sleep(time.Duration(*warmup * float64(time.Second)))
	measuring.Store(true)
	started := time.Now()
	time.Sleep(time.Duration(*duration * float64(time.Second)))
	measuring.Store(false)
	elapsed := time.Since(started)
	close(stop)
	wg.Wait()
	sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
	pct := func(p float64) float64 {
		if len(latencies) == 0 {
			return 0
		}
		i := int(p * float64(len(latencies)-1))
		return float64(latencies[i].Microseconds()) / 1000
	}
	out, _ := json.Marshal(map[string]any{
		"throughput": float64(checks.Load()) / elapsed.Seconds(),
		"p50_ms":     pct(0.50),
		"p99_ms":     pct(0.99),
		"checks":     checks.Load(),
		"errors":     errors.Load(),
		"mismatches": mismatches.Load(),
	})
	fmt.Println(string(out))
}

func readRoles(path string) ([]role, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var roles []role
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) >= 2 {
			roles = append(roles, role{fields[0], fields[1]})
		}
	}
	return roles, s.Err()
}
