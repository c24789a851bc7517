package main

import (
	"context"
	"errors"
	"io"

	"github.com/urfave/cli/v2"
)

type relayConfig struct{}

func relayFlags() []cli.Flag { return nil }

func relayConfigFrom(c *cli.Context) (relayConfig, error) { return relayConfig{}, nil }

func runRelay(ctx context.Context, cfg relayConfig, stderr io.Writer) error {
	return errors.New("not yet")
}
