"""A libzmq PUSH peer for loop's interop tests: connects to argv[1], sends
each argv[2:] hex string as one message, waits until they are written, and
exits (its connection then closes, as a real producer's does). Bounded:
the whole run gives up after 10 s."""
import sys
import zmq

ctx = zmq.Context()
s = ctx.socket(zmq.PUSH)
s.setsockopt(zmq.LINGER, 10000)
s.setsockopt(zmq.SNDTIMEO, 10000)
s.connect(sys.argv[1])
for h in sys.argv[2:]:
    s.send(bytes.fromhex(h))
s.close()  # linger: flush, then close the connection
ctx.term()
