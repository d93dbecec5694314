// Command tracecontext-service runs the W3C trace-context conformance service on weft:
//
//	go run ./examples/tracecontext-service 5000   # port, default 5000
//
// then, in a checkout of github.com/w3c/trace-context:
//
//	STRICT_LEVEL=2 SPEC_LEVEL=2 python test/test.py http://127.0.0.1:5000/test
package main

import (
	"context"
	"log"
	"net/http"
	"os"

	weft "weft.dev/sdk/go"
	"weft.dev/sdk/go/internal/w3cservice"
)

func main() {
	port := "5000"
	if len(os.Args) > 1 {
		port = os.Args[1]
	}
	tp, err := weft.NewTracerProvider(weft.WithServiceName("w3c-tracecontext-service"))
	if err != nil {
		log.Fatal(err)
	}
	defer tp.Shutdown(context.Background())
	log.Printf("w3c trace-context service on 127.0.0.1:%s/test", port)
	log.Fatal(http.ListenAndServe("127.0.0.1:"+port, w3cservice.Handler(tp)))
}
