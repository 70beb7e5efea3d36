"""Live workload: producer and consumer loops, the recorder, and the Locust users built on them."""
