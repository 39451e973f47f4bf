package socket

import (
	"net"

	"github.com/zmqguard/zmqguard/zmtpguard"
)

// Test-only names: the constructors by type, and accessors the package's
// tests assert on but users do not need (Stats, Event and Msg carry what
// they do need).

func NewRouter(o Options) (*Socket, error) { return New("ROUTER", o) }
func NewDealer(o Options) (*Socket, error) { return New("DEALER", o) }
func NewReq(o Options) (*Socket, error)    { return New("REQ", o) }
func NewPull(o Options) (*Socket, error)   { return New("PULL", o) }
func NewPush(o Options) (*Socket, error)   { return New("PUSH", o) }
func NewXPub(o Options) (*Socket, error)   { return New("XPUB", o) }
func NewSub(o Options) (*Socket, error)    { return New("SUB", o) }
func NewXSub(o Options) (*Socket, error)   { return New("XSUB", o) }

func (s *Socket) Type() zmtpguard.SocketType { return s.sockType() }
func (s *Socket) Addr() net.Addr             { return s.addr() }
func (s *Socket) Endpoints() []string        { return s.endpoints() }
func (s *Socket) Peers() []*Peer             { return s.peerList() }
func (s *Socket) Subscriptions() [][]byte    { return s.subscriptions() }

func (p *Peer) Addr() string                    { return p.String() }
func (p *Peer) NetAddr() net.Addr               { return p.netAddr() }
func (p *Peer) Type() zmtpguard.SocketType      { return p.peerType() }
func (p *Peer) Endpoint() string                { return p.endpointName() }
func (p *Peer) ZMTPVersion() (major, minor int) { return p.zmtpVersion() }

// checkOptions is what New checks: o with its defaults filled in, verified.
func checkOptions(o Options) error {
	f := o.withDefaults(kDealer)
	return f.verify()
}
