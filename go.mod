module github.com/zmqguard/zmqguard

go 1.26.0

require (
	github.com/go-zeromq/zmq4 v0.17.0
	github.com/tinylib/msgp v1.6.5
	go.uber.org/goleak v1.3.0
	golang.org/x/crypto v0.57.0
	pgregory.net/rapid v1.3.0
)

require (
	github.com/go-zeromq/goczmq/v4 v4.2.2 // indirect
	github.com/philhofer/fwd v1.2.0 // indirect
	golang.org/x/mod v0.41.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/text v0.42.0 // indirect
	golang.org/x/tools v0.49.0 // indirect
)
