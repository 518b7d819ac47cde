module github.com/idemkit/idem/interop

go 1.26.0

require (
	github.com/idemkit/idem v0.0.0
	github.com/stripe/stripe-go/v82 v82.5.1
	go.uber.org/goleak v1.3.0
)

replace github.com/idemkit/idem => ../
