"""Every product's stage assets (collect -> prepare -> plan -> execute -> land) come from one
builder (`product_stages`); each product's module declares what its land checks and reports:
the vector index (`vector_index`), the ticket intents (`ticket_intents`), the document briefs
(`document_briefs`)."""
