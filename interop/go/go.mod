module github.com/natural-key/natural-key/interop/go

go 1.26.0

require (
	github.com/oklog/ulid/v2 v2.1.2
	golang.org/x/text v0.44.0
)
