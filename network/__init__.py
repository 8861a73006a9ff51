"""The network layer, at the bottom of the project (numpy only): the topology model (topology.py), one file per
building block (blocks/), the one numbering of NPUs (coords.py), the one link numbering and routing (links.py),
graph topologies (graphs.py), every parser of a network description (parse.py), sizes and units (units.py), the
collective kinds (kinds.py) and the base error of bad input (errors.py). Every other layer imports it; it imports
none of them."""
