"""What the load-time rewrites (fused_attention.py, fused_quantization.py) read a graph with: who makes and who
reads each value, the small constants, and the node order after a swap. Torch-free: runtime code."""

from __future__ import annotations

import heapq

import numpy as np


def attribute(node, name: str, default):
    from onnx import helper

    found = [a for a in node.attribute if a.name == name]
    return helper.get_attribute_value(found[0]) if found else default


def fresh_name(base: str, taken: set[str]) -> str:
    """`base`, or the first of base_1, base_2, ... not in `taken`; it joins `taken`."""
    name, i = base, 0
    while name in taken:
        i += 1
        name = f"{base}_{i}"
    taken.add(name)
    return name


class GraphIndex:
    """A graph's nodes by the values they make and read, and its constants small enough to sit in the graph file
    (the weights' external data is never read)."""

    SMALL = 64  # elements: scalars, shapes, split sizes

    def __init__(self, model):
        from onnx import numpy_helper

        self.model = model
        self.nodes = list(model.graph.node)
        self.producer = {o: n for n in self.nodes for o in n.output if o}
        self.consumers: dict[str, list] = {}
        for n in self.nodes:
            for i in n.input:
                self.consumers.setdefault(i, []).append(n)
        self.outputs = {o.name for o in model.graph.output}
        self.dims = {i.name: list(i.dims) for i in model.graph.initializer}
        self.constants = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer
                          if not i.external_data and np.prod(i.dims, dtype=np.int64) <= self.SMALL}
        for n in self.nodes:
            value = attribute(n, "value", None) if n.op_type == "Constant" else None
            if value is not None and np.prod(value.dims, dtype=np.int64) <= self.SMALL:
                self.constants[n.output[0]] = numpy_helper.to_array(value)
        self.names = set(self.producer) | set(self.consumers) | set(self.dims)

    def made_by(self, name: str, op: str, domain: str = ""):
        """The node of type `op` (in `domain`; "" is ONNX's own) that makes `name`, else None."""
        node = self.producer.get(name)
        ok = node is not None and node.op_type == op and (node.domain or "") in ((domain,) if domain else ("", "ai.onnx"))
        return node if ok else None

    def scalar(self, name: str):
        value = self.constants.get(name)
        return None if value is None or value.size != 1 else value.reshape(())

    def only_read_by(self, name: str, readers: list) -> bool:
        """Whether `name` is read by these nodes alone (and is no graph output)."""
        ids = {id(n) for n in readers}
        return name not in self.outputs and all(id(n) in ids for n in self.consumers.get(name, []))

    def fresh(self, base: str) -> str:
        return fresh_name(base, self.names)

    def replace(self, removed: set[int], replacement: dict[int, object]) -> None:
        """Write the graph back: nodes whose id is in `removed` dropped, those in `replacement` swapped for theirs,
        in an order where each node follows those it reads, and initializers no node reads any more dropped."""
        nodes = [replacement.get(id(n), n) for n in self.nodes if id(n) not in removed or id(n) in replacement]
        graph = self.model.graph
        del graph.node[:]
        graph.node.extend(topological(nodes))
        read = {name for n in nodes for name in n.input} | {o.name for o in graph.output}
        orphans = {name for n in self.nodes if id(n) in removed for name in n.input} - read
        kept = [i for i in graph.initializer if i.name not in orphans]
        del graph.initializer[:]
        graph.initializer.extend(kept)


def topological(nodes: list) -> list:
    """`nodes` in an order where each comes after the nodes that make its inputs, otherwise as they were."""
    made = {o: i for i, n in enumerate(nodes) for o in n.output if o}
    waiting = [0] * len(nodes)
    readers: dict[int, list[int]] = {}
    for i, n in enumerate(nodes):
        for x in set(n.input):
            if x in made:
                waiting[i] += 1
                readers.setdefault(made[x], []).append(i)
    ready = [i for i, w in enumerate(waiting) if w == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(nodes[i])
        for j in readers.get(i, []):
            waiting[j] -= 1
            if waiting[j] == 0:
                heapq.heappush(ready, j)
    return order if len(order) == len(nodes) else nodes
