package main

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"
	"os"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v4"
	"go.temporal.io/server/common/authorization"
	"go.temporal.io/server/common/primitives"
)

// Tower's claim mapper: who a caller is and what Tower role it holds, from a JWT signed by
// a key the deployment trusts.
//
// The server's own JWT claim mapper fetches keys over HTTP (keySourceURIs) and maps a
// token onto Temporal's reader/writer/worker/admin roles, which cannot say "may start a
// refund but not signal it". This one reads a JWKS file of public keys (TOWER_AUTH_KEYS)
// once at start, accepts RS256 and ES256 only (so no alg=none, and a public key can never
// be used as an HMAC secret), and reads Tower's roles from the token:
//
//	{"sub": "alice", "aud": "tower-acme", "exp": 1767225600, "permissions": ["default:requester"]}
//
// Each permission is NAMESPACE:ROLE, ROLE one of requester, approver, operator, service
// (authz.go); "temporal-system:admin" is a cluster administrator (`tower setup`). `exp` is
// required: a token that never expires is refused. `aud` must name this deployment's
// audience (TOWER_AUTH_AUDIENCE, required): a token the same issuer minted for another
// service (or another Tower deployment) is refused here.

// towerRole is a set of Tower roles (a bit each).
type towerRole uint8

const (
	roleRequester towerRole = 1 << iota // may start the deployment's agents on its queues
	roleOperator                        // may reset, terminate, delete runs, run batches
	roleService                         // Tower's worker: may poll, start, signal, update
	roleApprover                        // an approver's `tower approve`, the inbox: signal, update
)

var roleNames = map[string]towerRole{"requester": roleRequester, "operator": roleOperator,
	"service": roleService, "approver": roleApprover}

// towerGrants is what a token grants: Tower roles per namespace (in Claims.Extensions).
type towerGrants map[string]towerRole

// maxTokenBytes bounds the work an anonymous caller can ask of the parser.
const maxTokenBytes = 8 * 1024

type tokenMapper struct {
	keys      map[string]crypto.PublicKey // by key id
	claimName string                      // the permissions claim (default "permissions")
	audience  string                      // what a token's aud must name
}

func newTokenMapper(keyFile, claimName, audience string) (*tokenMapper, error) {
	keys, err := loadJWKS(keyFile)
	if err != nil {
		return nil, fmt.Errorf("TOWER_AUTH_KEYS=%q: %w", keyFile, err)
	}
	if claimName == "" {
		claimName = "permissions"
	}
	if audience = strings.TrimSpace(audience); audience == "" {
		// Without one, a token minted by the same issuer for any other service would do.
		return nil, fmt.Errorf("TOWER_AUTH_AUDIENCE is not set: name the audience this " +
			"deployment's tokens carry (their aud claim), e.g. tower-acme")
	}
	return &tokenMapper{keys: keys, claimName: claimName, audience: audience}, nil
}

func (m *tokenMapper) GetClaims(info *authorization.AuthInfo) (*authorization.Claims, error) {
	claims := &authorization.Claims{AuthType: "jwt"}
	if info.AuthToken == "" {
		return claims, nil // a TLS client without a token: no roles at all
	}
	scheme, token, ok := strings.Cut(info.AuthToken, " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return nil, fmt.Errorf("authorization header: want \"Bearer <JWT>\"")
	}
	if len(token) > maxTokenBytes {
		return nil, fmt.Errorf("token of %d bytes: over %d", len(token), maxTokenBytes)
	}
	parser := jwt.NewParser(jwt.WithValidMethods([]string{"RS256", "ES256"}))
	parsed, err := parser.Parse(token, m.key)
	if err != nil {
		return nil, fmt.Errorf("token refused: %w", err)
	}
	body, _ := parsed.Claims.(jwt.MapClaims)
	now := time.Now().Unix()
	if !body.VerifyExpiresAt(now, true) { // Parse checks exp only when present
		return nil, fmt.Errorf("token refused: no exp, or expired")
	}
	if !body.VerifyAudience(m.audience, true) {
		return nil, fmt.Errorf("token refused: its aud does not name %q", m.audience)
	}
	if claims.Subject, _ = body["sub"].(string); claims.Subject == "" {
		return nil, fmt.Errorf("token refused: no sub")
	}
	grants := towerGrants{}
	listed, _ := body[m.claimName].([]any)
	for _, item := range listed {
		text, _ := item.(string)
		namespace, name, _ := strings.Cut(text, ":")
		if namespace == primitives.SystemLocalNamespace && name == "admin" {
			claims.System = authorization.RoleAdmin
			continue
		}
		role, known := roleNames[name]
		if namespace == "" || !known {
			// A typo must not quietly grant less (or, worse, be read as something else).
			return nil, fmt.Errorf("token refused: permission %q is not NAMESPACE:ROLE with "+
				"ROLE requester, approver, operator or service", text)
		}
		grants[namespace] |= role
	}
	claims.Extensions = grants
	return claims, nil
}

// key is the public key a token names by its kid, of the type its alg needs.
func (m *tokenMapper) key(token *jwt.Token) (any, error) {
	kid, _ := token.Header["kid"].(string)
	key, ok := m.keys[kid]
	if !ok {
		return nil, fmt.Errorf("unknown key id %q", kid)
	}
	switch token.Method.(type) {
	case *jwt.SigningMethodRSA:
		if _, ok := key.(*rsa.PublicKey); ok {
			return key, nil
		}
	case *jwt.SigningMethodECDSA:
		if _, ok := key.(*ecdsa.PublicKey); ok {
			return key, nil
		}
	}
	return nil, fmt.Errorf("key %q is not a key for %s", kid, token.Method.Alg())
}

// jwk is one key of a JWKS file (RFC 7517): RSA (n, e) or EC P-256 (x, y).
type jwk struct {
	Kty string `json:"kty"`
	Kid string `json:"kid"`
	Crv string `json:"crv"`
	N   string `json:"n"`
	E   string `json:"e"`
	X   string `json:"x"`
	Y   string `json:"y"`
	D   string `json:"d"`
}

// loadJWKS reads the public keys of a JWKS file ({"keys": [...]}), by key id.
func loadJWKS(path string) (map[string]crypto.PublicKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var set struct {
		Keys []jwk `json:"keys"`
	}
	if err := json.Unmarshal(data, &set); err != nil {
		return nil, fmt.Errorf("not a JWKS file: %w", err)
	}
	keys := map[string]crypto.PublicKey{}
	for i, k := range set.Keys {
		if k.Kid == "" || keys[k.Kid] != nil {
			return nil, fmt.Errorf("key %d: every key needs a kid of its own", i)
		}
		if k.D != "" {
			return nil, fmt.Errorf("key %q is a private key: the server needs public keys only", k.Kid)
		}
		key, err := publicKey(k)
		if err != nil {
			return nil, fmt.Errorf("key %q: %w", k.Kid, err)
		}
		keys[k.Kid] = key
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("no keys")
	}
	return keys, nil
}

func publicKey(k jwk) (crypto.PublicKey, error) {
	b64 := base64.RawURLEncoding
	switch k.Kty {
	case "RSA":
		n, errN := b64.DecodeString(k.N)
		e, errE := b64.DecodeString(k.E)
		if errN != nil || errE != nil || len(e) == 0 || len(e) > 4 {
			return nil, fmt.Errorf("bad n or e")
		}
		key := &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}
		if key.N.BitLen() < 2048 {
			return nil, fmt.Errorf("RSA key of %d bits: at least 2048", key.N.BitLen())
		}
		return key, nil
	case "EC":
		x, errX := b64.DecodeString(k.X)
		y, errY := b64.DecodeString(k.Y)
		if k.Crv != "P-256" || errX != nil || errY != nil || len(x) != 32 || len(y) != 32 {
			return nil, fmt.Errorf("want a P-256 key with 32-byte x and y")
		}
		// Refuses a point that is not on the curve.
		return ecdsa.ParseUncompressedPublicKey(elliptic.P256(), append(append([]byte{4}, x...), y...))
	}
	return nil, fmt.Errorf("key type %q: want RSA or EC", k.Kty)
}
