// Command nk-ferretdb runs FerretDB v1.24 (embedded package, SQLite backend) for natural-key's
// tests and examples, and doubles as a tiny client that pings a MongoDB URI.
//
//	nk-ferretdb serve -listen 127.0.0.1:0 -data DIR -uri-file FILE
//	nk-ferretdb ping URI
//
// We embed the library instead of installing cmd/ferretdb because a module-proxy install of
// cmd/ferretdb has no build/version/version.txt and panics at start-up; the embeddable package
// skips that check and keeps telemetry disabled by construction.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/FerretDB/FerretDB/ferretdb"
	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/mongo"
	"go.mongodb.org/mongo-driver/mongo/options"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: nk-ferretdb serve|ping ...")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "serve":
		serve(os.Args[2:])
	case "ping":
		if len(os.Args) != 3 {
			fmt.Fprintln(os.Stderr, "usage: nk-ferretdb ping URI")
			os.Exit(2)
		}
		if err := ping(os.Args[2]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	default:
		fmt.Fprintf(os.Stderr, "unknown command %q\n", os.Args[1])
		os.Exit(2)
	}
}

func serve(args []string) {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	listen := fs.String("listen", "127.0.0.1:0", "TCP address to listen on (loopback only)")
	data := fs.String("data", "", "directory for the SQLite files (required)")
	uriFile := fs.String("uri-file", "", "file to write the MongoDB URI to once listening")
	logLevel := fs.String("log-level", "warn", "debug, info, warn or error")
	_ = fs.Parse(args)

	if *data == "" {
		fmt.Fprintln(os.Stderr, "serve: -data is required")
		os.Exit(2)
	}
	host := *listen
	if i := strings.LastIndex(host, ":"); i >= 0 {
		host = host[:i]
	}
	if host != "127.0.0.1" && host != "localhost" && host != "[::1]" {
		fmt.Fprintf(os.Stderr, "serve: refusing to listen on %q: loopback only\n", *listen)
		os.Exit(2)
	}
	if err := os.MkdirAll(*data, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}

	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	f, err := ferretdb.New(&ferretdb.Config{
		Listener:  ferretdb.ListenerConfig{TCP: *listen},
		Logger:    logger,
		Handler:   "sqlite",
		SQLiteURL: "file:" + strings.TrimSuffix(*data, "/") + "/",
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = f.Run(ctx)
	}()

	// The engine has no retryable writes; saying so in the URI keeps every client honest.
	uri := strings.TrimSuffix(f.MongoDBURI(), "/") + "/?retryWrites=false"
	if *uriFile != "" {
		tmp := *uriFile + ".tmp"
		if err := os.WriteFile(tmp, []byte(uri+"\n"), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if err := os.Rename(tmp, *uriFile); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	fmt.Println(uri)
	<-done
}

func ping(uri string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	client, err := mongo.Connect(ctx, options.Client().ApplyURI(uri).
		SetServerSelectionTimeout(3*time.Second).SetRetryWrites(false))
	if err != nil {
		return err
	}
	defer client.Disconnect(context.Background())
	return client.Database("admin").RunCommand(ctx, bson.D{{Key: "ping", Value: 1}}).Err()
}
