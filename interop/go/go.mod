module github.com/natural-key/natural-key/interop/go

go 1.24

require github.com/oklog/ulid/v2 v2.1.2
