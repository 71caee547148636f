module github.com/tenure-dev/tenure/clients/go

go 1.24.0

require (
	github.com/tenure-dev/tenure/fence/go v0.0.0
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260120221211-b8f7ae30c516
	google.golang.org/grpc v1.80.0
	google.golang.org/protobuf v1.36.11
)

require (
	golang.org/x/net v0.49.0 // indirect
	golang.org/x/sys v0.40.0 // indirect
	golang.org/x/text v0.33.0 // indirect
)

replace github.com/tenure-dev/tenure/fence/go => ../../fence/go
