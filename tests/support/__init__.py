"""What several test modules share (builders, fault injection); no test module imports another."""
