"""`herd sim`: a fleet simulator. Scenario files (YAML) drive an embedded control plane
and simulated nodes through a timeline of faults, commands and assertions; chaos mode
injects random failures and measures how fast the view shows them."""
