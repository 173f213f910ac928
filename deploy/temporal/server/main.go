// Tower's build of the Temporal server: the unmodified server of go.temporal.io/server, with
// one frontend interceptor (guard.go) that bounds the bytes a signal may add to a run, and,
// when the config's authorization section names "tower", Tower's claim mapper (tokens.go)
// and authorizer (authz.go): requesters may only start the deployment's agents on its
// queues, only Tower's services and approvers may signal or update a run, and only
// operators delete runs or run batches (docs/production.md).
//
// It starts the way `temporal-server` does, so it replaces that binary as is:
//
//	temporal-server [--config-file F | --env E --config DIR --zone Z] [--allow-no-auth] start [--service S]...
//
// Without a config flag the configuration is the server's embedded template, filled from the
// environment (DB, POSTGRES_SEEDS, DYNAMIC_CONFIG_FILE_PATH, ...), as in the server's image.
// TOWER_SIGNAL_MAX_BYTES sets the guard's limit (default 9216). Authorization stays off unless
// TEMPORAL_AUTH_AUTHORIZER=tower and TEMPORAL_AUTH_CLAIM_MAPPER=tower (the embedded template's
// authorizer and claimMapper), with TOWER_AUTH_KEYS, TOWER_AUTH_AUDIENCE, TOWER_AUTH_AGENTS,
// TOWER_AUTH_QUEUES.
package main

import (
	"flag"
	"fmt"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	_ "time/tzdata" // time zones for schedules, on hosts without them

	"go.temporal.io/server/common/authorization"
	"go.temporal.io/server/common/config"
	"go.temporal.io/server/common/log"
	_ "go.temporal.io/server/common/persistence/sql/sqlplugin/mysql"
	_ "go.temporal.io/server/common/persistence/sql/sqlplugin/postgresql"
	_ "go.temporal.io/server/common/persistence/sql/sqlplugin/sqlite"
	"go.temporal.io/server/common/primitives"
	"go.temporal.io/server/temporal"
)

// defaultSignalMaxBytes: a Tower decision token is at most 8,000 characters
// (tower/core/signing.py); this leaves room for its JSON, encryption and trace header.
const defaultSignalMaxBytes = 9 * 1024

type services []string

func (s *services) String() string     { return strings.Join(*s, ",") }
func (s *services) Set(v string) error { *s = append(*s, strings.Split(v, ",")...); return nil }

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "temporal-server:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	global := flag.NewFlagSet("temporal-server", flag.ContinueOnError)
	root := global.String("root", ".", "root directory of the config dir")
	configDir := global.String("config", "config", "config dir, relative to --root")
	env := global.String("env", "development", "runtime environment: the config file's name")
	zone := global.String("zone", "", "availability zone")
	configFile := global.String("config-file", os.Getenv(config.EnvKeyConfigFile), "config file")
	global.Bool("allow-no-auth", false, "accepted for compatibility: no authorizer is the default")
	if err := global.Parse(args); err != nil {
		return err
	}
	if global.Arg(0) != "start" {
		return fmt.Errorf("usage: temporal-server [flags] start [--service S]... (got %q)", global.Args())
	}
	start := flag.NewFlagSet("start", flag.ContinueOnError)
	var chosen services
	start.Var(&chosen, "service", "a service to start (repeat; default all)")
	start.Var(&chosen, "svc", "same as --service")
	start.Var(&chosen, "services", "comma-separated services (older images' entrypoints)")
	if err := start.Parse(global.Args()[1:]); err != nil {
		return err
	}
	defaulted := false
	if len(chosen) == 0 {
		if v := os.Getenv("TEMPORAL_SERVICES"); v != "" {
			_ = chosen.Set(v)
		} else {
			chosen, defaulted = slices.Clone(temporal.DefaultServices), true
		}
	}
	limit, err := signalMaxBytes()
	if err != nil {
		return err
	}

	set := map[string]bool{}
	global.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var cfg *config.Config
	switch {
	case *configFile != "":
		cfg, err = config.Load(config.WithConfigFile(*configFile))
	case set["config"] || set["env"] || set["zone"]:
		cfg, err = config.Load(config.WithEnv(*env),
			config.WithConfigDir(path.Join(*root, *configDir)), config.WithZone(*zone))
	default:
		cfg, err = config.Load(config.WithEmbedded())
	}
	if err != nil {
		return fmt.Errorf("unable to load configuration: %w", err)
	}
	logger := log.NewZapLogger(log.BuildZapLogger(cfg.Log))
	authorizer, claimMapper, err := authorizationFromConfig(&cfg.Global.Authorization, logger)
	if err != nil {
		return err
	}
	// With authorization on, the server's own system worker reaches the frontend through
	// the internal frontend (USE_INTERNAL_FRONTEND), which trusts its cluster's members:
	// start it with the default services.
	_, internal := cfg.Services[string(primitives.InternalFrontendService)]
	if cfg.Global.Authorization.Authorizer == "tower" && !internal {
		// Else the system worker (schedules, batches) calls the public frontend with no
		// token, and Tower's authorizer refuses it.
		return fmt.Errorf("the tower authorizer needs the internal frontend: set " +
			"USE_INTERNAL_FRONTEND=true (and INTERNAL_FRONTEND_GRPC_PORT, ..._MEMBERSHIP_PORT)")
	}
	if internal && defaulted && !slices.Contains(chosen, string(primitives.InternalFrontendService)) {
		chosen = append(chosen, string(primitives.InternalFrontendService))
	}
	audience, err := authorization.GetAudienceMapperFromConfig(&cfg.Global.Authorization)
	if err != nil {
		return fmt.Errorf("unable to instantiate the audience mapper: %w", err)
	}
	logger.Info(fmt.Sprintf("Tower signal guard: at most %d bytes per signal", limit))
	server, err := temporal.NewServer(
		temporal.ForServices(chosen),
		temporal.WithConfig(cfg),
		temporal.WithLogger(logger),
		temporal.InterruptOn(temporal.InterruptCh()),
		temporal.WithAuthorizer(authorizer),
		temporal.WithClaimMapper(func(*config.Config) authorization.ClaimMapper { return claimMapper }),
		temporal.WithAudienceGetter(func(*config.Config) authorization.JWTAudienceMapper { return audience }),
		temporal.WithChainedFrontendGrpcInterceptors(signalGuard(limit)),
	)
	if err != nil {
		return fmt.Errorf("unable to create the server: %w", err)
	}
	return server.Start()
}

// authorizationFromConfig is the config's authorization section: the server's own
// authorizer and claim mapper ("" or "default"), or Tower's ("tower": authz.go, tokens.go),
// which read TOWER_AUTH_KEYS, TOWER_AUTH_AUDIENCE, TOWER_AUTH_AGENTS and TOWER_AUTH_QUEUES.
func authorizationFromConfig(cfg *config.Authorization, logger log.Logger,
) (authorization.Authorizer, authorization.ClaimMapper, error) {
	var authorizer authorization.Authorizer
	var mapper authorization.ClaimMapper
	var err error
	if cfg.Authorizer == "tower" {
		authorizer, err = newTowerAuthorizer(os.Getenv("TOWER_AUTH_AGENTS"), os.Getenv("TOWER_AUTH_QUEUES"))
	} else {
		authorizer, err = authorization.GetAuthorizerFromConfig(cfg)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("unable to instantiate the authorizer: %w", err)
	}
	if cfg.ClaimMapper == "tower" {
		mapper, err = newTokenMapper(os.Getenv("TOWER_AUTH_KEYS"), cfg.PermissionsClaimName,
			os.Getenv("TOWER_AUTH_AUDIENCE"))
	} else {
		mapper, err = authorization.GetClaimMapperFromConfig(cfg, logger)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("unable to instantiate the claim mapper: %w", err)
	}
	if (cfg.Authorizer == "tower") != (cfg.ClaimMapper == "tower") {
		// Tower's authorizer reads Tower's roles, which only Tower's claim mapper sets.
		return nil, nil, fmt.Errorf("authorizer %q with claim mapper %q: Tower's authorizer and "+
			"claim mapper go together (TEMPORAL_AUTH_AUTHORIZER=tower and "+
			"TEMPORAL_AUTH_CLAIM_MAPPER=tower)", cfg.Authorizer, cfg.ClaimMapper)
	}
	if cfg.Authorizer == "tower" {
		logger.Info("Tower authorizer: requesters may start only the deployment's agents on its queues")
	}
	return authorizer, mapper, nil
}

func signalMaxBytes() (int, error) {
	v := os.Getenv("TOWER_SIGNAL_MAX_BYTES")
	if v == "" {
		return defaultSignalMaxBytes, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1024 {
		return 0, fmt.Errorf("TOWER_SIGNAL_MAX_BYTES=%q: want a whole number of bytes, at least 1024", v)
	}
	return n, nil
}
