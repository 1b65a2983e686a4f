"""The deploy rehearsal on LocalStack (`make rehearse`)."""
