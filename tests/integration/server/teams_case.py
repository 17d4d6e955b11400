"""teams_case.py - the teams scenario both backends must answer alike (test_teams.py of
tests/integration/server and of tests/integration/redis_daemon): caps.teams.NAME.weight
and members from the config reach the queue."""

POOL = """  default:
    input_tpm: 65536
    max_queue_wait_s: 3600
    ticket_idle_s: 600
"""

CAPS = """caps:
  teams:
    a:
      weight: 1
      members: [a1, a2, a3]
    b:
      weight: 3
      members: [b1]
"""


def queue_twelve(test, s):
    """Empties the bucket, then team a's three agents and team b's one queue six requests
    each; returns [(agent, ticket, position when queued)] in that order."""
    status, body, _ = s.lease("z", 55705, 0)
    test.assertEqual(status, 200, body)
    queued = []
    for agent in ["a1", "a2", "a3"] * 2 + ["b1"] * 6:
        status, body, _ = s.lease(agent, 1024, 0, wait=0)
        test.assertEqual(status, 202, body)
        queued.append((agent, body["ticket"], body["position"]))
    return queued


def check_positions(test, s):
    """Team a (three agents, weight 1) and team b (one agent, weight 3) queue six
    requests each; b's tags grow three times slower, so it holds 3 of each 4 places."""
    places = [q[2] for q in queue_twelve(test, s)]
    # a's alone: 1..6; then b's go ahead of all but one, two, or three of a's
    test.assertEqual(places, [1, 2, 3, 4, 5, 6, 1, 2, 4, 5, 6, 8])
