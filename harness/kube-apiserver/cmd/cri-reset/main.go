// Command cri-reset stops and removes every pod sandbox of a CRI runtime
// (harness/node.py's containerd) through the CRI API, as the kubelet would:
// StopPodSandbox runs the CNI DEL (veth, IP lease) and removes the network
// namespace, RemovePodSandbox removes the containers. The harness runs it
// after stopping the kubelet, so a stopped node leaves nothing behind.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"go.opentelemetry.io/otel/trace/noop"
	criremote "k8s.io/cri-client/pkg"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: cri-reset unix:///path/to/containerd.sock")
		os.Exit(2)
	}
	runtime, err := criremote.NewRemoteRuntimeService(os.Args[1], 30*time.Second, noop.NewTracerProvider(), nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "cri-reset:", err)
		os.Exit(1)
	}
	ctx := context.Background()
	sandboxes, err := runtime.ListPodSandbox(ctx, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "cri-reset: list:", err)
		os.Exit(1)
	}
	failed := false
	for _, sandbox := range sandboxes {
		if err := runtime.StopPodSandbox(ctx, sandbox.Id); err != nil {
			fmt.Fprintln(os.Stderr, "cri-reset: stop", sandbox.Id, err)
			failed = true
			continue
		}
		if err := runtime.RemovePodSandbox(ctx, sandbox.Id); err != nil {
			fmt.Fprintln(os.Stderr, "cri-reset: remove", sandbox.Id, err)
			failed = true
		}
	}
	fmt.Printf("removed %d pod sandboxes\n", len(sandboxes))
	if failed {
		os.Exit(1)
	}
}
