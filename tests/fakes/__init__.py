"""Fakes of the outside world that tests talk to over real sockets."""
