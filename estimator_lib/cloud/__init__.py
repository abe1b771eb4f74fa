"""Google Cloud facts the runs use without TensorFlow: what a Vertex AI run costs (`cost`, its price table
`prices.json`)."""
