package recordcodec_test

import (
	"fmt"
	"net/http"

	"github.com/idemkit/idem/store/recordcodec"
)

// A store keeps a result's header as bytes and gives the same header back.
// The bytes do not depend on the order of the map, so two stores that
// write the same header write the same bytes.
func ExampleAppendHeader() {
	h := http.Header{"Location": {"/orders/42"}, "Content-Type": {"application/json"}}
	b := recordcodec.AppendHeader(nil, h)
	fmt.Printf("%d bytes\n", len(b))

	got, err := recordcodec.ParseHeader(b)
	fmt.Println(got, err)

	_, err = recordcodec.ParseHeader(b[:len(b)-1])
	fmt.Println(err)
	// Output:
	// 53 bytes
	// map[Content-Type:[application/json] Location:[/orders/42]] <nil>
	// recordcodec: corrupt stored header
}
