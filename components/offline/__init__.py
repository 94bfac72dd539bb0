"""What checks it all without a cloud: the mock engine, the render, the rules, the models they read, generated pages."""
