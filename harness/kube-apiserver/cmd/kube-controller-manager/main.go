// Command kube-controller-manager is the upstream kube-controller-manager
// (k8s.io/kubernetes cmd/kube-controller-manager/app), built from the same
// module and version as the harness's kube-apiserver, for the single-node
// cluster in harness/node.py.
package main

import (
	"os"
	_ "time/tzdata" // CronJob time zones, as upstream

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client metrics, as upstream
	"k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

func main() {
	os.Exit(cli.Run(app.NewControllerManagerCommand()))
}
