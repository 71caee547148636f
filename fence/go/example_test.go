package fence_test

import (
	"crypto/ed25519"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	fence "github.com/tenure-dev/tenure/fence/go"
)

// The middleware of the README on a ServeMux route, with a proof of the
// shared vectors ("a plain lease": orders, token 42).
func ExampleMiddleware() {
	keys, err := fence.ParseKeyset(exampleKeyset())
	if err != nil {
		panic(err)
	}
	guard := fence.Middleware(fence.Options{
		Keyset:   keys,
		Resource: func(r *http.Request) string { return r.PathValue("name") },
	})
	mux := http.NewServeMux()
	mux.Handle("PUT /resources/{name}", guard(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v, _ := fence.FromContext(r.Context())
		fmt.Fprintf(w, "%s wrote %s with token %d", v.Fence.Holder, v.Fence.Name, v.Fence.Token)
	})))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	proof := "ATR1D5i9Wfz8AAAAAAAAACoAAAAAAAABm3baqHsAAAAKBnRlbnVyZQZvcmRlcnMACHdvcmtlci0x_dJoGmx5eV50fujF_qwSKxFEnLWkBa_BUcboHuIPPwu24TMS_vHFnJswzcr7ENiULyMtQNDU5RlmvKlM4eTtAw"
	for _, path := range []string{"/resources/orders", "/resources/payments"} {
		req, _ := http.NewRequest(http.MethodPut, srv.URL+path, strings.NewReader("data"))
		req.Header.Set(fence.HeaderFence, proof)
		req.Header.Set(fence.HeaderFencingToken, "42")
		resp, err := srv.Client().Do(req)
		if err != nil {
			panic(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(resp.StatusCode, strings.TrimSpace(string(body)))
	}
	// Output:
	// 200 worker-1 wrote orders with token 42
	// 409 {"reason":"FENCE_WRONG_NAME","message":"the fence proof is for lease \"orders\", not \"payments\""}
}

// exampleKeyset is the shared vectors' keyset, built from their "active"
// test seed (so the example stands alone).
func exampleKeyset() string {
	seed := make([]byte, ed25519.SeedSize)
	for i := range seed {
		seed[i] = 1
	}
	pub := ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey)
	return base64.RawURLEncoding.EncodeToString(pub) + "  # active\n"
}
