// Command kubelet is the upstream kubelet (k8s.io/kubernetes
// cmd/kubelet/app), built from the same module and version as the harness's
// kube-apiserver, for the single node of harness/node.py.
package main

import (
	"context"
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client metrics, as upstream
	"k8s.io/kubernetes/cmd/kubelet/app"
)

func main() {
	os.Exit(cli.Run(app.NewKubeletCommand(context.Background())))
}
