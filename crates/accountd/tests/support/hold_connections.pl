#!/usr/bin/perl
# hold_connections.pl — a user who floods accountd: opens COUNT connections and holds them, idle,
# until its stdin closes (tests/local/overload.rs and tests/cluster/overload.rs runs it as alice). Prints "held N" once connected.
# With --reopen, a connection that accountd closes is opened again at once, as a determined
# flooder would, so that COUNT stay open (or keep trying) for as long as it runs. With --slow-body
# (tcp), each connection sends the headers of an agent report of 200,000 bytes and then one byte of
# its body, and nothing more: busy with a request that never arrives.
#   perl hold_connections.pl [--reopen] [--slow-body] tcp HOST:PORT FROM_ADDRESS COUNT
#   perl hold_connections.pl [--reopen] unix SOCKET_PATH COUNT
use strict;
use warnings;
use IO::Select;
use IO::Socket::INET;
use IO::Socket::UNIX;

my $reopen = @ARGV && $ARGV[0] eq '--reopen' ? shift : '';
my $slow_body = @ARGV && $ARGV[0] eq '--slow-body' ? shift : '';
my $kind = shift // '';
my $open;
my $count;
if ($kind eq 'tcp' && @ARGV == 3) {
    my ($to, $from);
    ($to, $from, $count) = @ARGV;
    $open = sub {
        my $sock = IO::Socket::INET->new(PeerAddr => $to, LocalAddr => $from, Proto => 'tcp')
            or die "connect to $to from $from: $!\n";
        if ($slow_body) {
            $sock->autoflush(1);
            print $sock "POST /v1/agent/report HTTP/1.1\r\nHost: $to\r\nContent-Type: application/json\r\n"
                . "Content-Length: 200000\r\n\r\n{";
        }
        $sock;
    };
} elsif ($kind eq 'unix' && @ARGV == 2) {
    my $path;
    ($path, $count) = @ARGV;
    $open = sub { IO::Socket::UNIX->new(Peer => $path, Type => SOCK_STREAM) or die "connect to $path: $!\n" };
} else {
    die "usage: hold_connections.pl [--reopen] tcp HOST:PORT FROM COUNT | [--reopen] unix PATH COUNT\n";
}
my $held = IO::Select->new(map { $open->() } 1 .. $count);
$| = 1;
print "held " . $held->count . "\n";
if (!$reopen) {
    my $until_closed = <STDIN>;
    exit 0;
}
# Until stdin closes: every connection accountd closed (readable: EOF or its reply) is replaced.
my $opened = 0;
$held->add(\*STDIN);
while (1) {
    for my $ready ($held->can_read(1)) {
        exit 0 if fileno($ready) == 0;
        $held->remove($ready);
        close $ready;
        $held->add($open->());
        $opened++;
    }
}
