"""Long scenarios shared by tests/resilience and bench/: churn, crashes and outages."""
