// Command kube-apiserver-harness runs a real kube-apiserver with an embedded
// etcd in one process, on loopback only, for kquota's tests and demo.
//
// It is the same code as the upstream kube-apiserver (k8s.io/kubernetes
// cmd/kube-apiserver/app), driven by its stable command-line flags, so CRD
// schemas, CEL validation, the status subresource, RBAC and watches behave
// exactly as on a real cluster. What is missing is every controller
// (kube-controller-manager): namespaces never finish deleting and nothing is
// garbage collected.
//
// On start it writes, into -dir:
//
//	kubeconfig       an admin identity (group system:masters)
//	identities.json  the static identities given with -user (name -> token, groups)
//	ready.json       port, pid and paths, written once /readyz answers
//	state.json       the ports of the API server and etcd, for a restart
//
// Started again on a directory it ran in before, it is the same server
// restarted: it keeps the etcd data, the ports (so existing kubeconfigs stay
// valid), the CA and serving certificate, the service account key and every
// identity's token. Only ready.json is removed at start and written anew.
// It stops on SIGTERM/SIGINT and also when its parent process goes away, so an
// interrupted test run leaves no apiserver or etcd behind.
package main

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"flag"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

type identity struct {
	Name   string   `json:"name"`
	Token  string   `json:"token"`
	Groups []string `json:"groups"`
}

type readyInfo struct {
	Server     string `json:"server"`
	Port       int    `json:"port"`
	EtcdURL    string `json:"etcdURL"`
	PID        int    `json:"pid"`
	Kubeconfig string `json:"kubeconfig"`
	CAFile     string `json:"caFile"`
	AdminToken string `json:"adminToken"`
}

// persisted is state.json: what a restart on the same directory reuses.
type persisted struct {
	Port           int `json:"port"`
	EtcdClientPort int `json:"etcdClientPort"`
	EtcdPeerPort   int `json:"etcdPeerPort"`
}

type userFlags []string

func (u *userFlags) String() string     { return strings.Join(*u, ";") }
func (u *userFlags) Set(v string) error { *u = append(*u, v); return nil }

func main() {
	var (
		dir      = flag.String("dir", "", "state directory (created if missing)")
		port     = flag.Int("port", 0, "secure port; 0 picks a free loopback port")
		etcdPort = flag.Int("etcd-client-port", 0, "etcd client port; 0 picks a free loopback port")
		peerPort = flag.Int("etcd-peer-port", 0, "etcd peer port; 0 picks a free loopback port")
		users    userFlags
		extraArg userFlags
		withPods = flag.Bool("pods", false, "serve a cluster with a controller-manager and a kubelet: keep the ServiceAccount admission plugin (pods get their token volume)")
	)
	flag.Var(&users, "user", "extra static identity NAME[:GROUP,GROUP...] (repeatable)")
	flag.Var(&extraArg, "apiserver-arg", "extra kube-apiserver flag, e.g. --max-requests-inflight=800 (repeatable)")
	flag.Parse()
	if *dir == "" {
		fail("-dir is required")
	}
	if !*withPods {
		// Without a controller-manager no ServiceAccount is ever created, and the
		// plugin would reject every pod for want of one.
		extraArg = append(userFlags{"--disable-admission-plugins=ServiceAccount"}, extraArg...)
	}
	if err := run(*dir, persisted{Port: *port, EtcdClientPort: *etcdPort, EtcdPeerPort: *peerPort}, users, extraArg); err != nil {
		fail(err.Error())
	}
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, "kube-apiserver-harness:", msg)
	os.Exit(1)
}

func run(dir string, ports persisted, users, extraArgs []string) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	certDir := filepath.Join(dir, "pki")
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		return err
	}
	// A stale ready.json would tell the harness a restarted server is ready.
	if err := os.Remove(filepath.Join(dir, "ready.json")); err != nil && !os.IsNotExist(err) {
		return err
	}
	state, err := loadState(filepath.Join(dir, "state.json"), ports)
	if err != nil {
		return fmt.Errorf("state: %w", err)
	}
	port, clientPort, peerPort := state.Port, state.EtcdClientPort, state.EtcdPeerPort

	caFile, certFile, keyFile, err := loadOrWriteServingCerts(certDir)
	if err != nil {
		return fmt.Errorf("certificates: %w", err)
	}
	saKey := filepath.Join(certDir, "sa.key")
	if !exists(saKey) {
		if err := writeRSAKey(saKey); err != nil {
			return fmt.Errorf("service account key: %w", err)
		}
	}
	// Tokens of a previous run on this directory stay valid after a restart.
	previous, err := loadTokens(filepath.Join(dir, "identities.json"))
	if err != nil {
		return fmt.Errorf("identities: %w", err)
	}
	tokenOf := func(name string) string {
		if t, ok := previous[name]; ok {
			return t
		}
		return randomToken()
	}
	adminToken := tokenOf("kquota-admin")
	idents := []identity{{Name: "kquota-admin", Token: adminToken, Groups: []string{"system:masters"}}}
	for _, u := range users {
		name, groups, _ := strings.Cut(u, ":")
		var gs []string
		if groups != "" {
			gs = strings.Split(groups, ",")
		}
		idents = append(idents, identity{Name: name, Token: tokenOf(name), Groups: gs})
	}
	tokenFile := filepath.Join(certDir, "tokens.csv")
	if err := writeTokenFile(tokenFile, idents); err != nil {
		return err
	}
	if err := writeJSON(filepath.Join(dir, "identities.json"), idents); err != nil {
		return err
	}

	etcd, etcdURL, err := startEtcd(filepath.Join(dir, "etcd"), clientPort, peerPort)
	if err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	defer etcd.Close()

	server := fmt.Sprintf("https://127.0.0.1:%d", port)
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := writeKubeconfig(kubeconfig, server, caFile, "kquota-admin", adminToken); err != nil {
		return err
	}

	go watchParent()
	go func() {
		if err := waitReady(server, caFile, adminToken, 3*time.Minute); err != nil {
			fmt.Fprintln(os.Stderr, "kube-apiserver-harness:", err)
			_ = syscall.Kill(os.Getpid(), syscall.SIGTERM)
			return
		}
		info := readyInfo{Server: server, Port: port, EtcdURL: etcdURL, PID: os.Getpid(),
			Kubeconfig: kubeconfig, CAFile: caFile, AdminToken: adminToken}
		if err := writeJSON(filepath.Join(dir, "ready.json"), info); err != nil {
			fmt.Fprintln(os.Stderr, "kube-apiserver-harness:", err)
		}
		fmt.Printf("READY %s kubeconfig=%s\n", server, kubeconfig)
	}()

	args := []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", port),
		"--cert-dir=" + certDir,
		"--tls-cert-file=" + certFile,
		"--tls-private-key-file=" + keyFile,
		"--client-ca-file=" + caFile,
		"--token-auth-file=" + tokenFile,
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + saKey,
		"--service-account-signing-key-file=" + saKey,
		"--api-audiences=https://kubernetes.default.svc.cluster.local",
		"--service-cluster-ip-range=10.0.0.0/24",
		"--allow-privileged=true",
		"--enable-priority-and-fairness=false",
		"--max-requests-inflight=2000",
		"--max-mutating-requests-inflight=1000",
		"--v=0",
	}
	args = append(args, extraArgs...)
	cmd := app.NewAPIServerCommand()
	cmd.SetArgs(args)
	return cmd.Execute()
}

// watchParent stops the server when the process that started it is gone:
// a test runner killed with SIGKILL cannot clean up after itself.
func watchParent() {
	parent := os.Getppid()
	for {
		time.Sleep(500 * time.Millisecond)
		if os.Getppid() != parent {
			_ = syscall.Kill(os.Getpid(), syscall.SIGTERM)
			return
		}
	}
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// loadState returns the ports of a previous run on this directory, with any
// given (non-zero) port taking precedence, and picks free ones for the rest;
// it records the result for the next restart.
func loadState(path string, given persisted) (persisted, error) {
	var st persisted
	if b, err := os.ReadFile(path); err == nil {
		if err := json.Unmarshal(b, &st); err != nil {
			return st, err
		}
	} else if !os.IsNotExist(err) {
		return st, err
	}
	for _, p := range []struct{ given, state *int }{
		{&given.Port, &st.Port}, {&given.EtcdClientPort, &st.EtcdClientPort}, {&given.EtcdPeerPort, &st.EtcdPeerPort},
	} {
		if *p.given != 0 {
			*p.state = *p.given
		}
		if *p.state == 0 {
			free, err := freePort()
			if err != nil {
				return st, err
			}
			*p.state = free
		}
	}
	return st, writeJSON(path, st)
}

// loadTokens reads identities.json of a previous run: name -> token.
func loadTokens(path string) (map[string]string, error) {
	out := map[string]string{}
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	var idents []identity
	if err := json.Unmarshal(b, &idents); err != nil {
		return nil, err
	}
	for _, id := range idents {
		out[id.Name] = id.Token
	}
	return out, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func startEtcd(dataDir string, clientPort, peerPort int) (*embed.Etcd, string, error) {
	cfg := embed.NewConfig()
	cfg.Name = "kquota-test"
	cfg.Dir = dataDir
	clientURL := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", clientPort)}
	peerURL := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", peerPort)}
	cfg.ListenClientUrls = []url.URL{clientURL}
	cfg.AdvertiseClientUrls = []url.URL{clientURL}
	cfg.ListenPeerUrls = []url.URL{peerURL}
	cfg.AdvertisePeerUrls = []url.URL{peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	// Test data is disposable; fsync on every write would dominate the
	// benchmarks that create thousands of objects.
	cfg.UnsafeNoFsync = true
	cfg.LogLevel = "error"
	cfg.QuotaBackendBytes = 4 << 30
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, "", err
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(60 * time.Second):
		e.Close()
		return nil, "", fmt.Errorf("etcd not ready after 60s")
	}
	return e, clientURL.String(), nil
}

func randomToken() string {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

func writeTokenFile(path string, idents []identity) error {
	var sb strings.Builder
	for i, id := range idents {
		fmt.Fprintf(&sb, "%s,%s,uid-%d,\"%s\"\n", id.Token, id.Name, i, strings.Join(id.Groups, ","))
	}
	return os.WriteFile(path, []byte(sb.String()), 0o600)
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func writeRSAKey(path string) error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	der := x509.MarshalPKCS1PrivateKey(key)
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: der}), 0o600)
}

// loadOrWriteServingCerts reuses the CA and serving certificate of a previous
// run on this directory (clients keep trusting a restarted server), or makes them.
func loadOrWriteServingCerts(dir string) (caFile, certFile, keyFile string, err error) {
	caFile = filepath.Join(dir, "ca.crt")
	certFile = filepath.Join(dir, "apiserver.crt")
	keyFile = filepath.Join(dir, "apiserver.key")
	if exists(caFile) && exists(certFile) && exists(keyFile) {
		return caFile, certFile, keyFile, nil
	}
	return writeServingCerts(dir)
}

// writeServingCerts makes a throwaway CA and a serving certificate for
// 127.0.0.1/localhost signed by it.
func writeServingCerts(dir string) (caFile, certFile, keyFile string, err error) {
	caKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "kquota-test-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.0.0.1")},
		DNSNames:     []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return
	}
	caFile = filepath.Join(dir, "ca.crt")
	certFile = filepath.Join(dir, "apiserver.crt")
	keyFile = filepath.Join(dir, "apiserver.key")
	if err = os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o600); err != nil {
		return
	}
	if err = os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return
	}
	err = os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600)
	return
}

func writeKubeconfig(path, server, caFile, user, token string) error {
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return err
	}
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: kquota-test
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: %s
  user:
    token: %s
contexts:
- name: kquota-test
  context:
    cluster: kquota-test
    user: %s
current-context: kquota-test
`, server, base64.StdEncoding.EncodeToString(ca), user, token, user)
	return os.WriteFile(path, []byte(cfg), 0o600)
}

func waitReady(server, caFile, token string, timeout time.Duration) error {
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	client := &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
	}
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		req, _ := http.NewRequest("GET", server+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("kube-apiserver not ready within %s", timeout)
}
